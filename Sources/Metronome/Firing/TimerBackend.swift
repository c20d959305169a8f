@preconcurrency import Dispatch

/// Where a ``SafeDispatchTimer``'s firings come from: Metronome's engine, GCD, or a test
/// double such as `MetronomeTesting.ManualTimeline`.
///
/// A backend only starts and stops firings. Which firing may run a handler is decided by
/// the timer's state machine, so a backend needs no state of its own and a firing that
/// arrives after a disarm is recognised as stale and dropped.
public protocol TimerBackend: Sendable {
    /// The current time on `clock`, in nanoseconds, as this backend's firings measure it.
    func now(_ clock: TimerClock) -> Int64

    /// Starts firing `schedule` on `clock`.
    ///
    /// The timer calls this while holding its lock, so that it has recorded the arming
    /// before the first firing looks for it: never call `fire` from inside this call, nor
    /// from inside ``ArmedTimer/disarm()``.
    ///
    /// - Parameters:
    ///   - schedule: When to fire.
    ///   - clock: The clock the schedule's nanoseconds are on.
    ///   - queue: Where `fire` runs; `nil` means wherever the backend fires (for the
    ///     engine, its firing thread).
    ///   - fire: Called once per firing with what the firing stands for.
    /// - Returns: A handle that stops the firings, or `nil` if the backend can no longer
    ///   arm timers (an engine that was shut down).
    func arm(
        _ schedule: TimerSchedule,
        clock: TimerClock,
        queue: DispatchQueue?,
        fire: @escaping @Sendable (Tick) -> Void
    ) -> (any ArmedTimer)?
}

extension TimerBackend {
    /// The real clock: what every backend but a test double measures.
    public func now(_ clock: TimerClock) -> Int64 {
        clock.nanosecondsNow
    }
}

/// One schedule's firings, started by ``TimerBackend/arm(_:clock:queue:fire:)``.
public protocol ArmedTimer: Sendable {
    /// Stops the firings. Never waits for a running one; idempotent.
    func disarm()
}
