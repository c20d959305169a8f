import Glibc
import MetronomeMeasurements

/// cyclictest's two process-wide controls around a measurement: memory locked so no page
/// fault lands in a handler (`--mlockall`), and `/dev/cpu_dma_latency` held at 0 so the CPUs
/// stay out of deep idle states, whose exit latency would otherwise be added to every
/// wake-up. The kernel keeps the latency request only while the file stays open, so this
/// holds it until ``release()``.
final class LatencyControls {
    /// Whether memory is locked.
    let memoryLocked: Bool
    /// Whether `/dev/cpu_dma_latency` is held at 0.
    let dmaLatencyHeld: Bool
    /// A line per control that was asked for and refused, for the report's notes.
    let refusals: [String]
    private var dmaLatencyDescriptor: CInt

    /// Applies what is asked for; a refusal is reported, never fatal, as in cyclictest.
    init(lockMemory: Bool, holdDMALatency: Bool) {
        var refusals: [String] = []
        var locked = false
        if lockMemory {
            locked = mlockall(CInt(MCL_CURRENT | MCL_FUTURE)) == 0
            if !locked { refusals.append("mlockall refused: \(MeasurementError.systemCall("mlockall", code: errno))") }
        }
        var descriptor: CInt = -1
        if holdDMALatency {
            descriptor = open("/dev/cpu_dma_latency", O_RDWR | O_CLOEXEC)
            var zero: Int32 = 0
            if descriptor < 0 {
                refusals.append("/dev/cpu_dma_latency not held at 0: \(String(cString: strerror(errno)))")
            } else if write(descriptor, &zero, MemoryLayout<Int32>.size) != MemoryLayout<Int32>.size {
                refusals.append("/dev/cpu_dma_latency not held at 0: \(String(cString: strerror(errno)))")
                close(descriptor)
                descriptor = -1
            }
        }
        self.memoryLocked = locked
        self.dmaLatencyHeld = descriptor >= 0
        self.dmaLatencyDescriptor = descriptor
        self.refusals = refusals
    }

    /// Lets the CPUs idle deeply again and unlocks memory.
    func release() {
        if self.dmaLatencyDescriptor >= 0 {
            close(self.dmaLatencyDescriptor)
            self.dmaLatencyDescriptor = -1
        }
        if self.memoryLocked { munlockall() }
    }

    deinit {
        self.release()
    }
}
