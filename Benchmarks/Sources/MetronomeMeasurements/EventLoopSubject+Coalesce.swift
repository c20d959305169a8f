import NIOCore
import NIOPosix

extension EventLoopSubject: CoalesceSubject {
    /// Schedules one task per deadline on a new one-thread loop, from the loop itself as a
    /// server's handlers do, and shuts the loop down once all have run.
    ///
    /// NIO has no leeway: every task is due at its deadline, so the loop wakes up for each
    /// deadline it has not yet passed. Wake-ups are the loop thread's voluntary context
    /// switches from the arming to the last task, as in a jitter run.
    ///
    /// - Throws: ``MeasurementError/timedOut(backend:recorded:expected:)`` if not every task
    ///   runs in time; NIO's error if the loop refuses a task.
    public func run(
        _ config: CoalesceConfiguration,
        deadlines: [Int64],
        recorder: CoalesceRecorder
    ) throws
        -> SubjectCounters
    {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        defer { try? group.syncShutdownGracefully() }
        let loop = group.next()
        let before = try loop.submit {
            let isolated = loop.assumeIsolated()
            for deadline in deadlines {
                isolated.scheduleTask(deadline: .uptimeNanoseconds(UInt64(deadline))) {
                    recorder.record(deadlineNanoseconds: deadline, firedNanoseconds: MonotonicTime.now())
                }
            }
            return VoluntaryWakeups.countOfThisThread()
        }.wait()
        let completed = recorder.waitUntilComplete(timeout: config.completionTimeout)
        let after = try loop.submit { VoluntaryWakeups.countOfThisThread() }.wait()
        guard completed else {
            throw MeasurementError.timedOut(backend: self.name, recorded: recorder.firings, expected: deadlines.count)
        }
        return SubjectCounters(wakeups: after.flatMap { after in before.map { after - $0 } }, note: Self.leewayNote)
    }
}
