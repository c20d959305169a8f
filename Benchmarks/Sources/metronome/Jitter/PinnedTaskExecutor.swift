import MetronomeMeasurements

/// A task executor with one thread of its own, pinned to a CPU: where a sleeping measuring
/// task resumes, so that its measuring code runs on its thread's CPU as every other
/// backend's does. Swift's cooperative pool cannot be pinned.
final class PinnedTaskExecutor: TaskExecutor, @unchecked Sendable {
    private struct Jobs {
        var waiting: [UnownedJob] = []
        var stopping = false
    }

    private let jobs = LockedCondition(Jobs())
    // Written once, in init; read by stop() on the thread that created the executor.
    private var thread: PosixThread?

    /// Starts the executor's thread on `cpu`.
    ///
    /// - Throws: ``MeasurementError`` if the thread cannot be started there.
    init(cpu: Int) throws {
        self.thread = try PosixThread.spawn(cpu: cpu) { [self] in self.runJobs() }
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        self.jobs.withLock { $0.waiting.append(job) }
        self.jobs.broadcast()
    }

    /// Runs the jobs already enqueued, then ends the thread. Call it once no task prefers
    /// this executor any more.
    func stop() {
        self.jobs.withLock { $0.stopping = true }
        self.jobs.broadcast()
        self.thread?.join()
        self.thread = nil
    }

    private func runJobs() {
        while true {
            // LockedCondition waits with a timeout only; a second is as good as forever here.
            _ = self.jobs.wait(timeout: .seconds(1)) { !$0.waiting.isEmpty || $0.stopping }
            let (batch, stopping) = self.jobs.withLock { jobs in
                defer { jobs.waiting = [] }
                return (jobs.waiting, jobs.stopping)
            }
            for job in batch {
                job.runSynchronously(on: self.asUnownedTaskExecutor())
            }
            if stopping, batch.isEmpty { return }
        }
    }
}
