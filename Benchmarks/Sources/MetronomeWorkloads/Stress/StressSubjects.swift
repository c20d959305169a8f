import Metronome

/// The subjects `metronome stress` can run, by the names its `--backends` option takes.
public enum StressSubjects {
    /// Every subject's name, in the order the CLI lists them.
    public static let names = [
        "engine", "sharded-engine", "dispatch", "scheduler", "expiring-value", "lifecycle", "edges",
    ]

    /// Shards of the `sharded-engine` subject's engine: more than this machine's cores, so
    /// that the stress threads' timers spread over several and every operation may cross
    /// from one thread's shard to another's.
    static let shards = 4

    /// Whether the lifecycle subject forks children in this process (not under
    /// ThreadSanitizer).
    public static var forksChildren: Bool { StressLifecycleSubject.canFork }

    /// Makes the subjects `names` lists, each engine-backed one on an engine of its own.
    ///
    /// - Parameters:
    ///   - names: Names from ``names``; an unknown one is a programming error.
    ///   - timers: Timers in each pool of `SafeDispatchTimer`s, and values in the pool of
    ///     `ExpiringValue`s.
    ///   - violations: Where the subjects record what they see broken.
    /// - Throws: `TimerError` when an engine cannot be created.
    public static func make(_ names: [String], timers: Int, violations: StressViolations) throws -> [any StressSubject]
    {
        try names.map { name -> any StressSubject in
            switch name {
            case "engine":
                let engine = try TimerEngine()
                return StressTimerPool(
                    name: name, backend: .engine(engine), engine: engine, timers: timers, violations: violations)
            case "sharded-engine":
                let engine = try TimerEngine(configuration: .init(shards: Self.shards))
                return StressTimerPool(
                    name: name, backend: .engine(engine), engine: engine, timers: timers, violations: violations)
            case "dispatch":
                return StressTimerPool(
                    name: name, backend: .dispatch, engine: nil, timers: timers, violations: violations)
            case "scheduler":
                return StressSchedulerPool(engine: try TimerEngine(), violations: violations)
            case "expiring-value":
                return StressExpiringPool(engine: try TimerEngine(), values: timers, violations: violations)
            case "lifecycle":
                return try StressLifecycleSubject(violations: violations)
            case "edges":
                return try StressEdgesSubject(violations: violations)
            default:
                preconditionFailure("no stress subject is called '\(name)'")
            }
        }
    }
}
