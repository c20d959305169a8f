internal import CMeasurements
import Glibc

/// The parts of the machine that decide how precise timers can be, recorded with every result.
///
/// A latency number means little without the kernel, the timer slack and whether real-time
/// priority was available (each moves lateness by tens of microseconds or more), so every
/// report carries these facts.
///
/// ```swift
/// let facts = MachineFacts.current()
/// facts.summaryLines.forEach { print($0) }
/// ```
public struct MachineFacts: Codable, Sendable, Equatable {
    /// The kernel release, as `uname -r` prints it.
    public var kernelRelease: String
    /// Online CPUs.
    public var cpuCount: Int
    /// CPU 0's cpufreq scaling governor, or `"unknown"` where cpufreq is not exposed (VMs).
    public var cpufreqGovernor: String
    /// The calling thread's timer slack in nanoseconds (`prctl(PR_GET_TIMERSLACK)`), by which
    /// the kernel may delay `epoll_wait`, `nanosleep` and futex timeouts; 50 µs by default.
    public var timerSlackNanoseconds: Int
    /// The kernel's current clocksource (`tsc`, `kvm-clock`, …), or `"unknown"`.
    public var clocksource: String
    /// Whether a thread of this process may switch itself to `SCHED_FIFO`.
    public var schedFIFOPermitted: Bool
    /// `"permitted"`, or the error `pthread_setschedparam` gave (usually `EPERM`).
    public var schedFIFOReason: String
    /// `/proc/sys/kernel/sched_rt_runtime_us`: the real-time CPU budget per period
    /// (-1 for unlimited), or `nil` if it cannot be read.
    public var schedRTRuntimeMicroseconds: Int?

    enum CodingKeys: String, CodingKey {
        case kernelRelease = "kernel"
        case cpuCount = "cpus"
        case cpufreqGovernor = "governor"
        case timerSlackNanoseconds = "timer_slack_ns"
        case clocksource
        case schedFIFOPermitted = "sched_fifo_permitted"
        case schedFIFOReason = "sched_fifo_reason"
        case schedRTRuntimeMicroseconds = "sched_rt_runtime_us"
    }

    /// Reads the facts of this machine, and the timer slack of the calling thread.
    ///
    /// Starts and joins one short-lived thread to probe `SCHED_FIFO`, so the caller's own
    /// scheduling policy is left alone.
    public static func current() -> MachineFacts {
        let fifo = probeSchedFIFO()
        return MachineFacts(
            kernelRelease: kernelRelease(),
            cpuCount: max(sysconf(Int32(_SC_NPROCESSORS_ONLN)), 1),
            cpufreqGovernor: SystemFile.read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor") ?? "unknown",
            timerSlackNanoseconds: timerSlack(),
            clocksource: SystemFile.read("/sys/devices/system/clocksource/clocksource0/current_clocksource")
                ?? "unknown",
            schedFIFOPermitted: fifo.permitted,
            schedFIFOReason: fifo.reason,
            schedRTRuntimeMicroseconds: SystemFile.read("/proc/sys/kernel/sched_rt_runtime_us").flatMap { Int($0) }
        )
    }

    /// The facts as short lines for a terminal.
    public var summaryLines: [String] {
        let runtime = self.schedRTRuntimeMicroseconds.map { $0 < 0 ? "unlimited" : "\($0) µs/s" } ?? "unknown"
        return [
            "kernel \(self.kernelRelease), \(self.cpuCount) CPU\(self.cpuCount == 1 ? "" : "s"), governor \(self.cpufreqGovernor), clocksource \(self.clocksource)",
            "timer slack \(self.timerSlackNanoseconds) ns (calling thread)",
            "SCHED_FIFO \(self.schedFIFOPermitted ? "permitted" : "not permitted: \(self.schedFIFOReason)"), RT runtime \(runtime)",
        ]
    }

    /// The calling thread's timer slack in nanoseconds, or -1 when `prctl` refuses to say.
    private static func timerSlack() -> Int {
        var slack: UInt = 0
        return cmeasurements_get_timer_slack(&slack) == 0 ? Int(slack) : -1
    }

    private static func kernelRelease() -> String {
        var names = utsname()
        guard uname(&names) == 0 else { return "unknown" }
        return withUnsafeBytes(of: &names.release) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
    }

    /// Whether a fresh thread could switch itself to `SCHED_FIFO` priority 1, and if not, why.
    private static func probeSchedFIFO() -> (permitted: Bool, reason: String) {
        let result = LockedCondition<CInt>(0)
        do {
            try PosixThread.spawn {
                var parameters = sched_param(sched_priority: 1)
                let rc = pthread_setschedparam(pthread_self(), SCHED_FIFO, &parameters)
                result.withLock { $0 = rc }
            }.join()
        } catch {
            return (false, error.description)
        }
        let rc = result.withLock { $0 }
        guard rc != 0 else { return (true, "permitted") }
        return (false, MeasurementError.systemCall("pthread_setschedparam", code: rc).description)
    }
}
