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
