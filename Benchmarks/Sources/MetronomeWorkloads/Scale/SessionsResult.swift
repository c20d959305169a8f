/// One implementation's row of `metronome scale --workload sessions`; JSON keys are part of
/// the stable schema.
public struct SessionsResult: Codable, Sendable {
    public var backend: String
    /// Live sessions, the touches' choice.
    public var values: Int
    public var touchesPerSecond: Double
    public var touchesPerSecondAllCores: Double
    /// `isExpired` reads on one thread, in the touches' order: the cost of reaching a
    /// session, which a touch pays too.
    public var readsPerSecond: Double
    /// Reads that found their live session expired: 0, or the run is broken.
    public var readsExpired: Int
    public var bytesPerValue: Double
    /// Sessions left to expire within the run.
    public var expiring: Int
    public var expiredOnce: Int
    public var expiredMoreThanOnce: Int
    public var neverExpired: Int
    public var early: Int
    public var p50LatenessMicroseconds: Double
    public var p99LatenessMicroseconds: Double

    enum CodingKeys: String, CodingKey {
        case backend, values, expiring, early
        case touchesPerSecond = "touches_per_s"
        case touchesPerSecondAllCores = "touches_per_s_all_cores"
        case readsPerSecond = "reads_per_s"
        case readsExpired = "reads_expired"
        case bytesPerValue = "bytes_per_value"
        case expiredOnce = "expired_once"
        case expiredMoreThanOnce = "expired_more_than_once"
        case neverExpired = "never_expired"
        case p50LatenessMicroseconds = "p50_us"
        case p99LatenessMicroseconds = "p99_us"
    }
}

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

    enum CodingKeys: String, CodingKey {
        case workload, values, operations, expiring, seed, order
        case lifetimeNanoseconds = "lifetime_ns"
        case expiringLifetimeNanoseconds = "expiring_lifetime_ns"
    }
}
