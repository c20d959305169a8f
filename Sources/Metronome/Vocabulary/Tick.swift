/// What a timer's handler receives: which deadline this firing stands for and how it went.
public struct Tick: Sendable, Hashable {
    /// The deadline this firing stands for, on the timer's clock: for a late repeating
    /// timer, the latest deadline that passed.
    public var scheduled: TimerInstant

    /// When the firing was committed to, on the same clock.
    public var fired: TimerInstant

    /// Deadlines of a repeating timer skipped ahead of this one because their leeway windows
    /// had closed.
    ///
    /// A late repeating timer does not burst to catch up (unless its schedule's
    /// ``MissedTickPolicy`` says ``MissedTickPolicy/burst``): it fires once, for the latest
    /// deadline, and reports here how many it skipped. The earliest deadline this firing
    /// covers is `scheduled - missed · period`. Always `0` for a one-shot timer.
    public var missed: Int

    /// The index of ``scheduled`` on the timer's schedule (`start + sequence · period`).
    ///
    /// Each tick's sequence is the previous tick's `sequence + missed + 1`.
    public var sequence: UInt64

    /// Creates a tick.
    public init(scheduled: TimerInstant, fired: TimerInstant, missed: Int, sequence: UInt64) {
        self.scheduled = scheduled
        self.fired = fired
        self.missed = missed
        self.sequence = sequence
    }

    /// This tick with both instants on `clock`: a backend reports nanoseconds, the timer
    /// knows their clock.
    /// This tick standing also for `earlier`, which never reached a handler: one more
    /// missed period, besides those each had missed. The one merge of skipped firings.
    func merged(after earlier: Tick) -> Tick {
        var merged = self
        merged.missed = Int(clamping: Int128(self.missed) + Int128(earlier.missed) + 1)
        return merged
    }

    func on(_ clock: TimerClock) -> Tick {
        var tick = self
        tick.scheduled.clock = clock
        tick.fired.clock = clock
        return tick
    }

    /// How long after ``scheduled`` the firing happened.
    public var lateness: Duration {
        self.scheduled.duration(to: self.fired)
    }
}

extension Tick: CustomStringConvertible, CustomDebugStringConvertible {
    /// The sequence, deadline, lateness and missed periods, such as
    /// `tick #3 at 3000000 ns, 0.000012 seconds late, 0 missed`.
    public var description: String {
        "tick #\(self.sequence) at \(self.scheduled), \(self.lateness) late, \(self.missed) missed"
    }

    /// Every field, such as
    /// `Tick(sequence: 3, scheduled: 3000000 ns, fired: 3012000 ns, missed: 0)`.
    public var debugDescription: String {
        "Tick(sequence: \(self.sequence), scheduled: \(self.scheduled), fired: \(self.fired), missed: \(self.missed))"
    }
}
