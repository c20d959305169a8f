/// The operators `ContinuousClock.Instant` and `SuspendingClock.Instant` have, so that an
/// ``EngineClock``'s instants read the same: `clock.now + .milliseconds(200)`.
extension TimerInstant {
    /// The instant `duration` after `instant`, saturating at either end of `Int64`.
    public static func + (instant: TimerInstant, duration: Duration) -> TimerInstant {
        instant.advanced(by: duration)
    }

    /// The instant `duration` before `instant`, saturating at either end of `Int64`.
    public static func - (instant: TimerInstant, duration: Duration) -> TimerInstant {
        instant.advanced(by: .zero - duration)
    }

    /// The duration from `rhs` to `lhs`, exact; meaningful only on one clock.
    public static func - (lhs: TimerInstant, rhs: TimerInstant) -> Duration {
        rhs.duration(to: lhs)
    }

    /// Moves `instant` `duration` later.
    public static func += (instant: inout TimerInstant, duration: Duration) {
        instant = instant + duration
    }

    /// Moves `instant` `duration` earlier.
    public static func -= (instant: inout TimerInstant, duration: Duration) {
        instant = instant - duration
    }
}
