import NIOCore
import NIOPosix

/// swift-nio: a chain of `scheduleTask(deadline:)` per timer on the one loop of a
/// `MultiThreadedEventLoopGroup`, as a NIO server runs a periodic job on its loop.
///
/// Each task, when it runs, schedules its timer's next deadline of the absolute schedule.
/// `NIODeadline` counts `CLOCK_MONOTONIC` nanoseconds, the clock firings are read on, so a
/// deadline reaches NIO unchanged. Deadlines that went by while the loop was late count as
/// missed and the chain goes on from the next one to come, as a timerfd's expiration count
/// does.
///
/// `scheduleTask` takes no leeway: every task is due at its deadline, whatever the run's
/// leeway. NIO counts none of its wake-ups, so they are the loop thread's voluntary context
/// switches, read on the loop before and after the run
/// (``VoluntaryWakeups/countOfThisThread()``); the reading after the run wakes the loop once
/// itself.
public struct EventLoopSubject: JitterSubject {
    /// `"nio"`.
    public let name = "nio"

    /// Creates the subject.
    public init() {}

    /// Runs one chain of scheduled tasks per timer on a new one-thread loop until `recorder`
    /// is complete, then shuts the loop down.
    ///
    /// - Throws: ``MeasurementError/invalidConfiguration(_:)`` for a clock other than
    ///   `CLOCK_MONOTONIC`, ``MeasurementError/timedOut(backend:recorded:expected:)`` if the
    ///   recorder does not complete in time; NIO's error if the loop refuses a task.
    public func run(_ config: JitterConfiguration, recorder: LatencyRecorder) throws -> SubjectCounters {
        guard config.clock == .monotonic else {
            throw MeasurementError.invalidConfiguration("nio schedules on CLOCK_MONOTONIC only")
        }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        defer { try? group.syncShutdownGracefully() }
        let loop = group.next()
        let start = config.start()
        let chains = try loop.submit {
            let chains = Chains(config: config, start: start, recorder: recorder, loop: loop)
            for timer in 0..<config.timers { chains.arm(timer: timer, tick: 0) }
            return NIOLoopBound(chains, eventLoop: loop)
        }.wait()
        let completed = recorder.waitUntilComplete(timeout: config.completionTimeout)
        let wakeups = try loop.submit { chains.value.stop() }.wait()
        guard completed else {
            throw MeasurementError.timedOut(
                backend: self.name, recorded: recorder.summary.samples, expected: recorder.target)
        }
        return SubjectCounters(wakeups: wakeups, note: Self.leewayNote)
    }

    static let leewayNote = "nio: scheduleTask has no leeway, so every task is due at its deadline"

    /// Every timer's chain, touched on the loop only.
    private final class Chains {
        let config: JitterConfiguration
        let start: Int64
        let recorder: LatencyRecorder
        let loop: NIOIsolatedEventLoop
        let wakeupsBefore = VoluntaryWakeups.countOfThisThread()
        var stopped = false
        /// Each timer's task to come, to cancel when the run ends.
        var pending: [Scheduled<Void>?]

        init(config: JitterConfiguration, start: Int64, recorder: LatencyRecorder, loop: any EventLoop) {
            self.config = config
            self.start = start
            self.recorder = recorder
            self.loop = loop.assumeIsolated()
            self.pending = Array(repeating: nil, count: config.timers)
        }

        func arm(timer: Int, tick: Int64) {
            let deadline = self.config.deadline(timer: timer, tick: tick, start: self.start)
            self.pending[timer] = self.loop.scheduleTask(deadline: .uptimeNanoseconds(UInt64(deadline))) {
                self.fire(timer: timer, tick: tick, deadline: deadline)
            }
        }

        private func fire(timer: Int, tick: Int64, deadline: Int64) {
            let fired = MonotonicTime.now()
            guard !self.stopped else { return }
            let passed = fired > deadline ? (fired - deadline) / self.config.intervalNanoseconds : 0
            self.recorder.record(scheduledNanoseconds: deadline, firedNanoseconds: fired, missed: Int(passed))
            MonotonicTime.spin(nanoseconds: self.config.handlerWorkNanoseconds)
            self.arm(timer: timer, tick: tick + 1 + passed)
        }

        /// Cancels every chain and returns the loop thread's wake-ups since it was armed, or
        /// `nil` where they cannot be read. Each task holds this object: dropping them breaks
        /// the cycle.
        func stop() -> Int? {
            self.stopped = true
            self.pending.forEach { $0?.cancel() }
            self.pending = []
            return VoluntaryWakeups.countOfThisThread().flatMap { after in self.wakeupsBefore.map { after - $0 } }
        }
    }
}
