/// The settings of a stress run, echoed in its JSON.
public struct StressConfiguration: Codable, Sendable {
    public var threads: Int
    public var durationSeconds: Double?
    public var operations: Int?
    public var load: Int
    public var timers: Int
    public var backends: [String]
    public var seed: UInt64

    enum CodingKeys: String, CodingKey {
        case threads, operations, load, timers, backends, seed
        case durationSeconds = "duration_s"
    }

    public init(
        threads: Int, durationSeconds: Double?, operations: Int?, load: Int, timers: Int, backends: [String],
        seed: UInt64
    ) {
        self.threads = threads
        self.durationSeconds = durationSeconds
        self.operations = operations
        self.load = load
        self.timers = timers
        self.backends = backends
        self.seed = seed
    }
}
