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

    enum CodingKeys: String, CodingKey {
        case timers, operations, seed, shards, order
        case gcdTimers = "gcd_timers"
        case fireWindowNanoseconds = "fire_window_ns"
    }

    public init(
        timers: Int, gcdTimers: Int, operations: Int, fireWindowNanoseconds: Int64, seed: UInt64, shards: Int,
        order: AccessOrder = .random
    ) {
        self.timers = timers
        self.gcdTimers = gcdTimers
        self.operations = operations
        self.fireWindowNanoseconds = fireWindowNanoseconds
        self.seed = seed
        self.shards = shards
        self.order = order
    }
}
