/// One implementation's row of `metronome scale --workload sessions`; JSON keys are part of
/// the stable schema.
struct SessionsResult: Codable, Sendable {
    var backend: String
    /// Live sessions touched at random.
    var values: Int
    var touchesPerSecond: Double
    var touchesPerSecondAllCores: Double
    var bytesPerValue: Double
    /// Sessions left to expire within the run.
    var expiring: Int
    var expiredOnce: Int
    var expiredMoreThanOnce: Int
    var neverExpired: Int
    var early: Int
    var p50LatenessMicroseconds: Double
    var p99LatenessMicroseconds: Double

    enum CodingKeys: String, CodingKey {
        case backend, values, expiring, early
        case touchesPerSecond = "touches_per_s"
        case touchesPerSecondAllCores = "touches_per_s_all_cores"
        case bytesPerValue = "bytes_per_value"
        case expiredOnce = "expired_once"
        case expiredMoreThanOnce = "expired_more_than_once"
        case neverExpired = "never_expired"
        case p50LatenessMicroseconds = "p50_us"
        case p99LatenessMicroseconds = "p99_us"
    }
}

/// The settings of a sessions run, echoed in its JSON.
struct SessionsConfiguration: Codable, Sendable {
    var workload = ScaleWorkload.sessions.rawValue
    var values: Int
    var operations: Int
    var lifetimeNanoseconds: Int64
    var expiring: Int
    var expiringLifetimeNanoseconds: Int64
    var seed: UInt64

    enum CodingKeys: String, CodingKey {
        case workload, values, operations, expiring, seed
        case lifetimeNanoseconds = "lifetime_ns"
        case expiringLifetimeNanoseconds = "expiring_lifetime_ns"
    }
}
