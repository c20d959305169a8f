/// The settings of a scale run, echoed in its JSON.
public struct ScaleConfiguration: Codable, Sendable {
    public var timers: Int
    public var gcdTimers: Int
    public var operations: Int
    public var fireWindowNanoseconds: Int64
    public var seed: UInt64
    /// Shards of the engines under test (`TimerEngine.Configuration.shards`).
    public var shards: Int
    /// Which timers the reschedules pick.
    public var order: AccessOrder
    /// The armed counts of the armed-count table: timers left armed per loop (or sleeping
    /// tasks) while its pairs run.
    public var armed: [Int]
    /// Add+cancel pairs per run of the armed-count table.
    public var armedOperations: Int
    /// How long one run of the armed-count table may take before it is stopped and
    /// reported as not finished.
    public var timeLimitNanoseconds: Int64

    enum CodingKeys: String, CodingKey {
        case timers, operations, seed, shards, order, armed
        case armedOperations = "armed_operations"
        case timeLimitNanoseconds = "time_limit_ns"
        case gcdTimers = "gcd_timers"
        case fireWindowNanoseconds = "fire_window_ns"
    }

    public init(
        timers: Int, gcdTimers: Int, operations: Int, fireWindowNanoseconds: Int64, seed: UInt64, shards: Int,
        order: AccessOrder = .random, armed: [Int] = [1_000, 10_000, 100_000], armedOperations: Int = 20_000,
        timeLimitNanoseconds: Int64 = 10_000_000_000
    ) {
        self.timers = timers
        self.gcdTimers = gcdTimers
        self.operations = operations
        self.fireWindowNanoseconds = fireWindowNanoseconds
        self.seed = seed
        self.shards = shards
        self.order = order
        self.armed = armed
        self.armedOperations = armedOperations
        self.timeLimitNanoseconds = timeLimitNanoseconds
    }
}
