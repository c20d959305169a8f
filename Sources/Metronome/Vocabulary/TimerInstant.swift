/// A point in time on a ``TimerClock``: nanoseconds since that clock's epoch, and the clock.
///
/// An instant knows its clock, so a deadline read on one clock is never armed on another:
/// every call that takes an instant refuses one of a clock other than its own (a timer's
/// `schedule(at:)` returns `false`, an ``EngineClock`` sleep throws
/// ``TimerError/invalidArgument``). Instants of different clocks still sort (by their
/// nanoseconds, then by clock), but their order and the durations between them mean
/// nothing.
public struct TimerInstant: InstantProtocol, Sendable, Hashable, Comparable, CustomStringConvertible {
    /// Nanoseconds since the clock's epoch (boot for monotonic and boottime, 1970 for wall).
    public var nanoseconds: Int64

    /// The clock the nanoseconds count on.
    public var clock: TimerClock

    /// Creates an instant from nanoseconds on `clock`.
    ///
    /// - Parameters:
    ///   - nanoseconds: Nanoseconds since the clock's epoch.
    ///   - clock: The clock they count on; monotonic, the clock of `DispatchTime`, by default.
    public init(nanoseconds: Int64, clock: TimerClock = .monotonic) {
        self.nanoseconds = nanoseconds
        self.clock = clock
    }

    /// Saturates at either end of `Int64`: the sum is taken in 128 bits, so a duration too
    /// long for `Int64` nanoseconds still moves an instant from the other end.
    public func advanced(by duration: Duration) -> TimerInstant {
        TimerInstant(
            nanoseconds: Int64(clamping: Int128(self.nanoseconds) + duration.wholeNanoseconds), clock: self.clock)
    }

    /// Exact for any two instants: the difference is taken in `Duration`'s 128 bits, where
    /// one of `Int64` nanoseconds could overflow.
    public func duration(to other: TimerInstant) -> Duration {
        .nanoseconds(other.nanoseconds) - .nanoseconds(self.nanoseconds)
    }

    /// By nanoseconds, and instants of different clocks with equal nanoseconds by clock, so
    /// that the order stays total and agrees with `==`.
    public static func < (lhs: TimerInstant, rhs: TimerInstant) -> Bool {
        lhs.nanoseconds != rhs.nanoseconds ? lhs.nanoseconds < rhs.nanoseconds : lhs.clock.rank < rhs.clock.rank
    }

    /// Equal instants are the same nanosecond on the same clock.
    public static func == (lhs: TimerInstant, rhs: TimerInstant) -> Bool {
        lhs.nanoseconds == rhs.nanoseconds && lhs.clock == rhs.clock
    }

    public var description: String { "\(self.nanoseconds) ns" }
}

extension TimerInstant {
    /// The same instant on the boottime clock, which `ContinuousClock` reads on Linux: exact,
    /// counted from the clock's own epoch.
    public init(_ instant: ContinuousClock.Instant) {
        self.init(
            nanoseconds: ContinuousClock().systemEpoch.duration(to: instant).saturatingNanoseconds, clock: .boottime)
    }

    /// The same instant on the monotonic clock, which `SuspendingClock` reads on Linux: exact,
    /// counted from the clock's own epoch.
    public init(_ instant: SuspendingClock.Instant) {
        self.init(
            nanoseconds: SuspendingClock().systemEpoch.duration(to: instant).saturatingNanoseconds, clock: .monotonic)
    }
}
