#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension TimerEngine.Configuration {
    /// Checks every setting against what an engine can honour, naming the first one that
    /// it cannot.
    ///
    /// ```swift
    /// do {
    ///     try TimerEngine.Configuration(realtimePriority: 0).validate()
    /// } catch {
    ///     print(error)   // mtr_engine_create: realtimePriority must be nil or in 1...99, not 0: …
    /// }
    /// ```
    ///
    /// - Throws: ``TimerError`` with `EINVAL`, its ``TimerError/setting`` naming the refused
    ///   setting and its ``TimerError/reason`` the allowed range: a real-time priority
    ///   outside 1...99, a CPU the machine does not have, a spin window outside
    ///   0...``maximumSpinWindow``, a late threshold that is not positive or does not fit
    ///   in `Int64` nanoseconds, or a shard count outside 1...``maximumShards``.
    public func validate() throws(TimerError) {
        let highest = EngineLimits.realtimePriority
        if let priority = self.realtimePriority, !(1...highest).contains(priority) {
            throw Self.refusal("realtimePriority", "must be nil or in 1...\(highest), not \(priority)")
        }
        if let cpu = self.cpu {
            // The machine's CPUs, as the core counts them, within what a cpu_set_t holds.
            let cpus = min(sysconf(Int32(_SC_NPROCESSORS_CONF)), 1024)
            guard (0..<cpus).contains(cpu) else {
                throw Self.refusal("cpu", "must be nil or in 0..<\(cpus), not \(cpu)")
            }
        }
        guard self.spinWindow >= .zero, self.spinWindow <= Self.maximumSpinWindow else {
            throw Self.refusal("spinWindow", "must be in 0...\(Self.maximumSpinWindow), not \(self.spinWindow)")
        }
        guard self.lateThreshold > .zero, self.lateThreshold.representableNanoseconds != nil else {
            throw Self.refusal(
                "lateThreshold", "must be positive and fit in Int64 nanoseconds, not \(self.lateThreshold)")
        }
        guard (1...Self.maximumShards).contains(self.shards) else {
            throw Self.refusal("shards", "must be in 1...\(Self.maximumShards), not \(self.shards)")
        }
    }

    private static func refusal(_ setting: String, _ reason: String) -> TimerError {
        .invalid(setting, reason, in: "mtr_engine_create")
    }
}
