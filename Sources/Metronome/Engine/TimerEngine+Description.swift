extension TimerEngine: CustomStringConvertible, CustomDebugStringConvertible {
    /// The configuration and the counters now, such as
    /// `TimerEngine(realtimePriority: none, cpu: none, spinWindow: 0.0 seconds, lateThreshold:
    /// 0.001 seconds; wakeups: 12, fired: 15, …)`.
    ///
    /// Built without the `Engine` trait it says that GCD serves, and shows only what applies:
    /// the queue's name and the armed timers, such as
    /// `TimerEngine(GCD serves: built without the Engine trait, queue: pacer; armed: 2)`.
    ///
    /// Reading it takes a snapshot of ``counters``.
    public var description: String {
        #if Engine
        "TimerEngine(\(self.configuration); \(self.counters))"
        #else
        "TimerEngine(\(self.configuration); armed: \(self.counters.armed))"
        #endif
    }

    /// The description plus how the requested thread settings turned out.
    ///
    /// Built without the `Engine` trait, only the refusals of the settings that GCD cannot
    /// apply, when some were asked for.
    public var debugDescription: String {
        #if Engine
        "TimerEngine(\(self.configuration); \(self.counters); \(self.threadReport))"
        #else
        let report = self.threadReport
        let refusals = [("realtimePriority", report.realtimeRefusal), ("cpu", report.cpuRefusal)]
            .compactMap { setting, refusal in refusal.map { "\(setting): refused (\($0))" } }
        let parts = ["\(self.configuration)", "armed: \(self.counters.armed)"] + refusals
        return "TimerEngine(\(parts.joined(separator: "; ")))"
        #endif
    }
}

extension TimerEngine.Configuration: CustomStringConvertible {
    /// Every setting, `none` for one left unset.
    ///
    /// Built without the `Engine` trait, GCD serves and applies only the name, which labels
    /// the engine's queue: `GCD serves: built without the Engine trait, queue: pacer`.
    public var description: String {
        #if Engine
        let priority = self.realtimePriority.map(String.init) ?? "none"
        let cpu = self.cpu.map(String.init) ?? "none"
        let name = self.name ?? "numbered"
        return
            "realtimePriority: \(priority), cpu: \(cpu), spinWindow: \(self.spinWindow), lateThreshold: \(self.lateThreshold), name: \(name), shards: \(self.shards)"
        #else
        return "GCD serves: built without the Engine trait, queue: \(self.name ?? "metronome")"
        #endif
    }
}

extension TimerEngine.Counters: CustomStringConvertible {
    /// Every counter by name, such as `wakeups: 12, fired: 15, late: 0, …`.
    public var description: String {
        [
            "wakeups: \(self.wakeups)", "fired: \(self.fired)", "late: \(self.late)",
            "missedPeriods: \(self.missedPeriods)", "armed: \(self.armed)", "coalesced: \(self.coalesced)",
            "clockSteps: \(self.clockSteps)", "batched: \(self.batched)", "memoryBytes: \(self.memoryBytes)",
            "takeovers: \(self.takeovers)",
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
