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
