/// One backend's row of `metronome scale`; JSON keys are part of the stable schema.
public struct ScaleResult: Codable, Sendable {
    public var backend: String
    /// Timers armed while measuring.
    public var timers: Int
    public var addCancelPerSecond: Double
    public var addCancelPerSecondAllCores: Double?
    /// Reschedules to a random deadline, earlier or later.
    public var reschedulePerSecond: Double?
    /// Reschedules that only push deadlines later, the idle-timeout case.
    public var rescheduleLaterPerSecond: Double?
    public var bytesPerTimer: Double
    /// Timers fired in the fire phase (one-shots due within `fire_window_ns`).
    public var fired: Int
    public var firesPerSecond: Double
    public var outOfOrder: Int
    public var early: Int
    public var p50LatenessMicroseconds: Double
    public var p99LatenessMicroseconds: Double

    enum CodingKeys: String, CodingKey {
        case backend, timers, fired, early
        case addCancelPerSecond = "add_cancel_per_s"
        case addCancelPerSecondAllCores = "add_cancel_per_s_all_cores"
        case reschedulePerSecond = "reschedule_per_s"
        case rescheduleLaterPerSecond = "reschedule_later_per_s"
        case bytesPerTimer = "bytes_per_timer"
        case firesPerSecond = "fires_per_s"
        case outOfOrder = "out_of_order"
        case p50LatenessMicroseconds = "p50_us"
        case p99LatenessMicroseconds = "p99_us"
    }
}
