/// The settings of a sessions run, echoed in its JSON.
public struct SessionsConfiguration: Codable, Sendable {
    public var workload = "sessions"
    public var values: Int
    public var operations: Int
    public var lifetimeNanoseconds: Int64
    public var expiring: Int
    public var expiringLifetimeNanoseconds: Int64
    public var seed: UInt64
    /// Which sessions the touches pick.
    public var order: AccessOrder

    enum CodingKeys: String, CodingKey {
        case workload, values, operations, expiring, seed, order
        case lifetimeNanoseconds = "lifetime_ns"
        case expiringLifetimeNanoseconds = "expiring_lifetime_ns"
    }

    /// The settings; `expiring` sessions of `expiringLifetimeNanoseconds` are left to expire.
    public init(
        values: Int, operations: Int, lifetimeNanoseconds: Int64, expiring: Int, expiringLifetimeNanoseconds: Int64,
        seed: UInt64, order: AccessOrder = .random
    ) {
        self.values = values
        self.operations = operations
        self.lifetimeNanoseconds = lifetimeNanoseconds
        self.expiring = expiring
        self.expiringLifetimeNanoseconds = expiringLifetimeNanoseconds
        self.seed = seed
        self.order = order
    }
}
