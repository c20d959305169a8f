@preconcurrency import Dispatch

/// Nanoseconds from the Dispatch types the `DispatchSourceTimer`-shaped API takes; `nil` for values no
/// timer can honour (negative, or not finite). A span past `Int64` nanoseconds (about 292
/// years) saturates, as a `Duration` does: the one rule for every API, so that such a
/// deadline never comes.
enum DispatchConversions {
    /// A finite interval, or `.never`.
    enum Interval: Equatable {
        case nanoseconds(Int64)
        case never

        /// The period of a timer: `nil` for `.never`, which means a one-shot.
        var nanoseconds: Int64? {
            switch self {
            case .nanoseconds(let nanoseconds): nanoseconds
            case .never: nil
            }
        }
    }

    static func interval(_ interval: DispatchTimeInterval) -> Interval? {
        let value: Int
        let scale: Int64
        switch interval {
        case .seconds(let seconds): (value, scale) = (seconds, nanosecondsPerSecond)
        case .milliseconds(let milliseconds): (value, scale) = (milliseconds, 1_000_000)
        case .microseconds(let microseconds): (value, scale) = (microseconds, 1_000)
        case .nanoseconds(let nanoseconds): (value, scale) = (nanoseconds, 1)
        case .never: return .never
        @unknown default: return nil
        }
        guard value >= 0 else { return nil }
        let (nanoseconds, overflow) = Int64(value).multipliedReportingOverflow(by: scale)
        return .nanoseconds(overflow ? .max : nanoseconds)
    }

    static func interval(seconds: Double) -> Int64? {
        // A finite span so long that its nanoseconds overflow a Double saturates too.
        let nanoseconds = seconds * 1e9
        guard seconds.isFinite, nanoseconds >= 1 else { return nil }
        return Int64(exactly: nanoseconds.rounded(.down)) ?? .max
    }

    /// A `DispatchTime` (always `CLOCK_MONOTONIC`) as nanoseconds on `clock`, read through
    /// `now` (the backend's clocks) so that virtual time converts like real time.
    /// `.distantFuture` stays as far away as a deadline can be.
    static func deadline(_ deadline: DispatchTime, on clock: TimerClock, now: (TimerClock) -> Int64) -> Int64 {
        let monotonic = Int64(clamping: deadline.uptimeNanoseconds)
        guard clock != .monotonic, monotonic != .max else { return monotonic }
        // Not `-now`: a virtual timeline may stand at `Int64.min`, which has no negation.
        let offset = Int64(clamping: Int128(monotonic) - Int128(now(.monotonic)))
        return max(0, now(clock).addingSaturating(offset))
    }
}
