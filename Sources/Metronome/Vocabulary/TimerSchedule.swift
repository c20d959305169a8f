/// When a timer fires: a deadline, an optional period and a leeway, in nanoseconds on the
/// timer's own clock.
///
/// A schedule is validated once, at construction, so the state machine and the backends
/// never have to handle a negative deadline, a non-positive period or a leeway window that
/// runs past `Int64.max`.
///
/// A timer may fire anywhere in `[deadline, deadline + leeway]`. A repeating timer keeps the
/// phase of its first deadline: its deadlines are `deadline + k · period` for `k >= 0`, so
/// lateness in one tick never shifts the later ones, unless its ``missedTicks`` policy is
/// ``MissedTickPolicy/delay``.
public struct TimerSchedule: Hashable, Sendable {
    /// The first (or only) deadline, absolute, in nanoseconds.
    public internal(set) var deadlineNanoseconds: Int64

    /// The distance between deadlines of a repeating timer; `nil` for a one-shot timer.
    public var periodNanoseconds: Int64? {
        self.period == 0 ? nil : self.period
    }

    /// The period, or 0 for a one-shot timer: an `Int64?` would pad every schedule, and
    /// every armed timer's state, by a word for its one tag byte.
    private let period: Int64

    /// How late the timer may fire so that wake-ups can be coalesced.
    public internal(set) var leewayNanoseconds: Int64

    /// What a repeating timer does after a late tick; ``MissedTickPolicy/skip`` by default,
    /// and for a one-shot, which has no later deadline to miss.
    public internal(set) var missedTicks: MissedTickPolicy

    /// Creates a schedule, or returns `nil` if the values cannot describe a timer.
    ///
    /// A leeway larger than the period is clamped to the period, so consecutive windows never
    /// overlap.
    ///
    /// - Parameters:
    ///   - deadlineNanoseconds: The first (or only) deadline; must not be negative.
    ///   - periodNanoseconds: `nil` for a one-shot timer, otherwise greater than zero.
    ///   - leewayNanoseconds: Must not be negative.
    ///   - missedTicks: What a repeating timer does after a late tick.
    /// - Returns: `nil` for a negative deadline, a period of zero or less, a negative leeway,
    ///   or when `deadline + leeway` (after clamping) does not fit in `Int64`.
    public init?(
        deadlineNanoseconds: Int64, periodNanoseconds: Int64? = nil, leewayNanoseconds: Int64 = 0,
        missedTicks: MissedTickPolicy = .skip
    ) {
        guard deadlineNanoseconds >= 0, leewayNanoseconds >= 0 else { return nil }
        var leeway = leewayNanoseconds
        if let period = periodNanoseconds {
            guard period > 0 else { return nil }
            leeway = min(leeway, period)
        }
        // The backends arm for the hard expiry; it must be representable.
        guard !deadlineNanoseconds.addingReportingOverflow(leeway).overflow else { return nil }
        self.deadlineNanoseconds = deadlineNanoseconds
        self.period = periodNanoseconds ?? 0
        self.leewayNanoseconds = leeway
        self.missedTicks = missedTicks
    }

    /// A schedule whose parts came from a valid one: a timer keeps them apart, in less room.
    init(validDeadline deadline: Int64, period: Int64, leeway: Int64, missedTicks: MissedTickPolicy) {
        self.deadlineNanoseconds = deadline
        self.period = period
        self.leewayNanoseconds = leeway
        self.missedTicks = missedTicks
    }

    /// The period, 0 for a one-shot: the form a timer keeps and the engine takes.
    var periodOrZero: Int64 { self.period }

    /// Whether the timer fires more than once.
    public var isRepeating: Bool { self.periodNanoseconds != nil }

    /// The first deadline of this schedule that is not before `now`.
    ///
    /// A one-shot timer has a single deadline, which is returned even if it has passed. For a
    /// repeating timer this is the first `deadline + k · period` (`k >= 0`) that is at or after
    /// `now`, so the timer keeps its phase instead of drifting by the time it was late.
    ///
    /// - Parameter now: The current time on the timer's clock.
    /// - Returns: The deadline, saturated to `Int64.max` if it is not representable.
    public func nextDeadline(onOrAfter now: Int64) -> Int64 {
        guard let period = self.periodNanoseconds, now > self.deadlineNanoseconds else {
            return self.deadlineNanoseconds
        }
        // Cannot overflow: deadline >= 0 and now > deadline.
        let elapsed = now - self.deadlineNanoseconds
        let (whole, remainder) = elapsed.quotientAndRemainder(dividingBy: period)
        let periods = remainder == 0 ? whole : whole + 1
        let (offset, offsetOverflow) = periods.multipliedReportingOverflow(by: period)
        let (deadline, deadlineOverflow) = self.deadlineNanoseconds.addingReportingOverflow(offset)
        return offsetOverflow || deadlineOverflow ? .max : deadline
    }

    /// This schedule as it continues after the timer was suspended until `now`.
    ///
    /// Periods that passed while the timer was suspended are skipped, not reported as missed.
    /// A repeating deadline at the resume instant itself counts as passed: it may have been
    /// delivered just before the suspend, and must never be delivered twice. A one-shot
    /// timer whose deadline passed is unchanged, so it fires by its deadline plus leeway (at
    /// once if that has passed too).
    ///
    /// - Parameter now: The time of the resume on the timer's clock.
    /// - Returns: The same schedule with its deadline moved to the first one after `now`,
    ///   capped at `Int64.max - leeway`.
    func resumed(at now: Int64) -> TimerSchedule {
        var resumed = self
        let next = self.isRepeating ? self.nextDeadline(onOrAfter: now.addingSaturating(1)) : self.deadlineNanoseconds
        // The cap keeps the guarantee made by `init?`: deadline + leeway never overflows.
        resumed.deadlineNanoseconds = min(
            next,
            .max - self.leewayNanoseconds
        )
        return resumed
    }
}

extension TimerSchedule: CustomStringConvertible {
    /// The deadline, period and leeway, such as `at 5000000 ns every 1000000 ns, leeway 0 ns`,
    /// and the missed-tick policy of a repeating schedule when it is not the default.
    public var description: String {
        let period = self.periodNanoseconds.map { " every \($0) ns" } ?? ""
        let policy = self.isRepeating && self.missedTicks != .skip ? ", missed ticks: \(self.missedTicks)" : ""
        return "at \(self.deadlineNanoseconds) ns\(period), leeway \(self.leewayNanoseconds) ns\(policy)"
    }
}

// The nanoseconds every schedule is made of: a `Duration` converted once, and sums that
// saturate, so that a deadline past `Int64` is one that never comes.

extension Int64 {
    package func addingSaturating(_ other: Int64) -> Int64 {
        let (sum, overflow) = self.addingReportingOverflow(other)
        return overflow ? (other > 0 ? .max : .min) : sum
    }
}

extension Duration {
    /// This duration in whole nanoseconds (rounded toward zero), in 128 bits, which hold
    /// any `Duration`'s. Every schedule and reschedule given a `Duration` converts it
    /// here, so it divides `attoseconds` once (`components` divides by 10^18 first), and
    /// in 64 bits when they fit: under 9.2 s, as most leeways are, the division is a
    /// multiplication, while a 128-bit one is a library call.
    package var wholeNanoseconds: Int128 {
        let attoseconds = self.attoseconds
        if let short = Int64(exactly: attoseconds) { return Int128(short / attosecondsPerNanosecond) }
        return attoseconds / Int128(attosecondsPerNanosecond)
    }

    /// This duration in whole nanoseconds, or `nil` when that does not fit in `Int64`.
    package var representableNanoseconds: Int64? {
        Int64(exactly: self.wholeNanoseconds)
    }

    /// This duration in whole nanoseconds, clamped to `Int64`'s range.
    package var saturatingNanoseconds: Int64 {
        self.representableNanoseconds ?? (self > .zero ? .max : .min)
    }
}

/// Nanoseconds in a second: deadlines are `Int64` nanoseconds.
let nanosecondsPerSecond: Int64 = 1_000_000_000

/// Attoseconds in a nanosecond: `Duration`'s unit.
let attosecondsPerNanosecond: Int64 = 1_000_000_000
