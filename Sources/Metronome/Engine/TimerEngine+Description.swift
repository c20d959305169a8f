extension TimerEngine: CustomStringConvertible, CustomDebugStringConvertible {
    /// The configuration and the counters now, such as
    /// `TimerEngine(realtimePriority: none, cpu: none, spinWindow: 0.0 seconds, lateThreshold:
    /// 0.001 seconds; wakeups: 12, fired: 15, …)`.
    ///
    /// Reading it takes a snapshot of ``counters``.
    public var description: String {
        "TimerEngine(\(self.configuration); \(self.counters))"
    }

    /// The description plus how the requested thread settings turned out.
    public var debugDescription: String {
        "TimerEngine(\(self.configuration); \(self.counters); \(self.threadReport))"
    }
}

extension TimerEngine.Configuration: CustomStringConvertible {
    /// Every setting, `none` for one left unset.
    public var description: String {
        let priority = self.realtimePriority.map(String.init) ?? "none"
        let cpu = self.cpu.map(String.init) ?? "none"
        let name = self.name ?? "numbered"
        return
            "realtimePriority: \(priority), cpu: \(cpu), spinWindow: \(self.spinWindow), lateThreshold: \(self.lateThreshold), name: \(name), shards: \(self.shards)"
    }
}

extension TimerEngine.Counters: CustomStringConvertible {
    /// Every counter by name, such as `wakeups: 12, fired: 15, late: 0, …`.
    public var description: String {
        [
            "wakeups: \(self.wakeups)", "fired: \(self.fired)", "late: \(self.late)",
            "missedPeriods: \(self.missedPeriods)", "armed: \(self.armed)", "coalesced: \(self.coalesced)",
            "clockSteps: \(self.clockSteps)", "batched: \(self.batched)", "memoryBytes: \(self.memoryBytes)",
        ].joined(separator: ", ")
    }
}

extension TimerEngine.ThreadReport: CustomStringConvertible {
    /// The granted settings and the reasons for refused ones, such as
    /// `realtimePriority: refused (pthread_setschedparam: Operation not permitted (errno 1)), cpu: none`.
    public var description: String {
        let priority = Self.describe(granted: self.realtimePriority, refusal: self.realtimeRefusal)
        let cpu = Self.describe(granted: self.cpu, refusal: self.cpuRefusal)
        return "thread: \(self.threadName), realtimePriority: \(priority), cpu: \(cpu)"
    }

    private static func describe(granted: Int?, refusal: TimerError?) -> String {
        if let refusal { return "refused (\(refusal))" }
        return granted.map(String.init) ?? "none"
    }
}
