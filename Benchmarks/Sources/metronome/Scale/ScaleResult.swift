/// One backend's row of `metronome scale`; JSON keys are part of the stable schema.
struct ScaleResult: Codable, Sendable {
    var backend: String
    /// Timers armed while measuring.
    var timers: Int
    var addCancelPerSecond: Double
    var addCancelPerSecondAllCores: Double?
    var reschedulePerSecond: Double?
    var bytesPerTimer: Double
    /// Timers fired in the fire phase (one-shots due within `fire_window_ns`).
    var fired: Int
    var firesPerSecond: Double
    var outOfOrder: Int
    var early: Int
    var p50LatenessMicroseconds: Double
    var p99LatenessMicroseconds: Double

    enum CodingKeys: String, CodingKey {
        case backend, timers, fired, early
        case addCancelPerSecond = "add_cancel_per_s"
        case addCancelPerSecondAllCores = "add_cancel_per_s_all_cores"
        case reschedulePerSecond = "reschedule_per_s"
        case bytesPerTimer = "bytes_per_timer"
        case firesPerSecond = "fires_per_s"
        case outOfOrder = "out_of_order"
        case p50LatenessMicroseconds = "p50_us"
        case p99LatenessMicroseconds = "p99_us"
    }
}

/// The settings of a scale run, echoed in its JSON.
struct ScaleConfiguration: Codable, Sendable {
    var timers: Int
    var gcdTimers: Int
    var operations: Int
    var fireWindowNanoseconds: Int64
    var seed: UInt64

    enum CodingKeys: String, CodingKey {
        case timers, operations, seed
        case gcdTimers = "gcd_timers"
        case fireWindowNanoseconds = "fire_window_ns"
    }
}
