/// What a subject reports about itself after a run.
public struct SubjectCounters: Sendable, Equatable {
    /// Times its threads woke up to fire timers, or `nil` if it cannot count them; runners then
    /// use ``VoluntaryWakeups`` instead.
    public var wakeups: Int?
    /// Anything a reader of the results should know about this run, or `nil`.
    public var note: String?

    /// Creates counters.
    public init(wakeups: Int? = nil, note: String? = nil) {
        self.wakeups = wakeups
        self.note = note
    }
}
