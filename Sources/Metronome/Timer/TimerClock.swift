internal import CMetronome

/// The clock a timer's deadlines are measured on.
public enum TimerClock: Sendable, Hashable, CaseIterable {
    /// `CLOCK_MONOTONIC`: stops while the machine is suspended; the clock of `DispatchTime`.
    case monotonic
    /// `CLOCK_BOOTTIME`: keeps counting through suspend, like `ContinuousClock` on Linux.
    case boottime
    /// `CLOCK_REALTIME`: wall time. When the wall clock is set, the engine notices and
    /// re-evaluates every wall timer.
    case wall

    /// The current time on this clock.
    public func now() -> TimerInstant {
        var nanoseconds: Int64 = 0
        // Cannot fail: every case maps to a valid clock.
        _ = mtr_clock_now(self.coreClock, &nanoseconds)
        return TimerInstant(nanoseconds: nanoseconds, clock: self)
    }

    var coreClock: mtr_clock_id {
        switch self {
        case .monotonic: .MTR_CLOCK_MONOTONIC
        case .boottime: .MTR_CLOCK_BOOTTIME
        case .wall: .MTR_CLOCK_REALTIME
        }
    }
}
