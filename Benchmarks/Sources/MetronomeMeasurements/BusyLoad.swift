import MetronomeTestSupport
import Synchronization

/// Threads that spin on the CPU, to measure timers "under heavy load" without other tools.
///
/// The threads never block, so they compete with timer threads for every core. Their kernel
/// thread ids are recorded so that ``ProcessCPUTime`` can leave their CPU time out of a
/// subject's cost.
///
/// ```swift
/// let load = BusyLoad()
/// try load.start(threads: 2)
/// defer { load.stop() }
/// let cpu = ProcessCPUTime.nanoseconds(excluding: load.threadIDs)
/// ```
public final class BusyLoad: Sendable {
    private struct Running {
        var threads: [PosixThread] = []
        var threadIDs: [Int32] = []
        let stop = StopFlag()
    }

    private final class StopFlag: Sendable {
        let requested = Atomic<Bool>(false)
    }

    private let running = LockedCondition(Running())

    /// Creates a load with no threads running.
    public init() {}

    /// Starts `threads` spinning threads and returns once each has recorded its thread id.
    ///
    /// Threads add up over calls: starting 2 and then 1 gives 3.
    ///
    /// - Parameter threads: How many threads to start; 0 starts none.
    /// - Throws: ``MeasurementError/systemCall(_:code:)`` if a thread cannot be created; the
    ///   threads already started keep running until ``stop()``.
    public func start(threads: Int) throws(MeasurementError) {
        let (stop, expected) = self.running.withLock { ($0.stop, $0.threadIDs.count + threads) }
        for _ in 0..<threads {
            let thread: PosixThread
            do {
                thread = try PosixThread.spawn { [running] in
                    let id = KernelThread.currentID()
                    running.update { $0.threadIDs.append(id) }
                    while !stop.requested.load(ordering: .relaxed) {}
                }
            } catch {
                throw MeasurementError(error)
            }
            self.running.withLock { $0.threads.append(thread) }
        }
        // A new thread is scheduled soon even on a loaded machine; the limit only guards a hang.
        _ = self.running.wait(timeout: .seconds(10)) { $0.threadIDs.count >= expected }
    }

    /// Stops every thread and waits for them to exit. Stopping an idle load does nothing.
    public func stop() {
        let stopped = self.running.withLock { running in
            defer { running = Running() }
            return running
        }
        stopped.stop.requested.store(true, ordering: .relaxed)
        for thread in stopped.threads {
            thread.join()
        }
    }

    /// Kernel thread ids of the running threads.
    public var threadIDs: [Int32] {
        self.running.withLock { $0.threadIDs }
    }
}
