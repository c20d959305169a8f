import Metronome

/// A `Clock` on a ``ManualTimeline``'s virtual time: sleeps end when the timeline is
/// advanced past their deadline, not when real time passes.
///
/// Code written against `some Clock<Duration>` (`Task.sleep(for:clock:)`, swift-async-
/// algorithms' `AsyncTimerSequence`, a retry loop with backoff) runs unchanged in tests and
/// finishes as fast as the test advances the timeline:
///
/// ```swift
/// let timeline = ManualTimeline()
/// let clock = timeline.clock
/// let retry = Task { try await Task.sleep(for: .seconds(30), clock: clock) }
/// await timeline.waitForArmedTimers(1)   // the sleep has armed its timer
/// timeline.advance(by: .seconds(30))     // and now it returns
/// try await retry.value
/// ```
///
/// Inside ``ManualTimeline/run(_:)`` neither the wait nor the advance is needed: the run
/// moves time to the sleep's deadline once every task of it waits.
///
/// Each ``sleep(until:tolerance:)`` arms a one-shot timer on the timeline and suspends the
/// task; advancing the timeline to the deadline resumes it (on the advancing thread, which
/// hands the task back to its executor). A deadline at or before ``now`` returns at once.
/// Cancelling the sleeping task disarms its timer and throws `CancellationError`.
public struct ManualClock: Clock, Sendable {
    /// The duration type of the clock: `Swift.Duration`.
    public typealias Duration = Swift.Duration

    /// The instant type of the clock: nanoseconds of virtual time.
    public typealias Instant = TimerInstant

    /// The timeline whose time this clock reads and whose timers end its sleeps.
    public let timeline: ManualTimeline

    // Sleeping is the engine clock's, on the timeline as its backend: one implementation
    // of the cancellation races for real and virtual time.
    private let sleeper: EngineClock

    /// Creates a clock on `timeline`'s virtual time.
    ///
    /// - Parameter timeline: The timeline to read and to arm sleeps on.
    public init(timeline: ManualTimeline) {
        self.timeline = timeline
        self.sleeper = EngineClock(backend: .custom(timeline))
    }

    /// The timeline's virtual time now.
    public var now: TimerInstant {
        self.timeline.now
    }

    /// One nanosecond: the resolution of the timeline.
    public var minimumResolution: Duration {
        .nanoseconds(1)
    }

    /// Suspends the task until the timeline reaches `deadline`.
    ///
    /// - Parameters:
    ///   - deadline: The virtual instant to wake at.
    ///   - tolerance: Accepted and ignored: the timeline fires every timer at its deadline.
    /// - Throws: `CancellationError` if the task is cancelled before or during the sleep
    ///   (the timer is then disarmed).
    public func sleep(until deadline: TimerInstant, tolerance: Duration? = nil) async throws {
        try await self.sleeper.sleep(until: deadline, tolerance: tolerance)
    }
}

extension ManualTimeline {
    /// A `Clock` reading this timeline, whose sleeps end as it is advanced.
    public var clock: ManualClock {
        ManualClock(timeline: self)
    }
}
