/// What a subject reports about itself after a run.
public struct SubjectCounters: Sendable, Equatable {
    /// Times its threads woke up to fire timers, or `nil` if it cannot count them; runners then
    /// use ``VoluntaryWakeups`` instead.
    public var wakeups: Int?
    /// Anything a reader of the results should know about this run, or `nil`.
    public var note: String?
    /// Each measuring thread's part, when the subject ran several (or pinned ones); `nil`
    /// for a subject measured as a whole.
    public var threads: [JitterThreadResult]?

    /// Creates counters.
    public init(wakeups: Int? = nil, note: String? = nil, threads: [JitterThreadResult]? = nil) {
        self.wakeups = wakeups
        self.note = note
        self.threads = threads
    }
}
