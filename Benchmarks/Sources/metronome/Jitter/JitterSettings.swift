import MetronomeMeasurements

/// Everything a jitter run was asked for, as its report's `config`: the measurement's
/// settings and the command's own (load, rounds, backends, the measuring threads and
/// their CPUs, engine-spin's window, the policy and priority of engine-rt and cyclictest,
/// the histogram directory, the break threshold) and whether memory was locked and
/// `/dev/cpu_dma_latency` held, in one flat object.
struct JitterSettings: Codable, Sendable {
    var measurement: JitterConfiguration
    var load: Int
    var rounds: Int
    var backends: [String]
    /// Measuring threads per backend; 1 when no thread option was given.
    var threads: Int
    /// The CPUs the measuring threads were pinned to, in thread order, or `nil` when unpinned.
    var affinity: [Int]?
    /// Whether `--smp` chose the threads and CPUs.
    var smp: Bool
    var spinNanoseconds: Int64
    var policy: SchedulingPolicy
    var priority: Int
    var hgrmDirectory: String?
    var memoryLocked: Bool
    var dmaLatencyHeld: Bool
    var breaktraceNanoseconds: Int64?

    enum CodingKeys: String, CodingKey {
        case load, rounds, backends, threads, affinity, smp, policy, priority
        case spinNanoseconds = "spin_ns"
        case hgrmDirectory = "hgrm"
        case memoryLocked = "mlockall"
        case dmaLatencyHeld = "cpu_dma_latency_held"
        case breaktraceNanoseconds = "breaktrace_ns"
    }

    init(
        measurement: JitterConfiguration, load: Int, rounds: Int, backends: [String], threads: Int, affinity: [Int]?,
        smp: Bool, spinNanoseconds: Int64,
        policy: SchedulingPolicy, priority: Int, hgrmDirectory: String?, memoryLocked: Bool, dmaLatencyHeld: Bool,
        breaktraceNanoseconds: Int64?
    ) {
        self.measurement = measurement
        self.load = load
        self.rounds = rounds
        self.backends = backends
        self.threads = threads
        self.affinity = affinity
        self.smp = smp
        self.spinNanoseconds = spinNanoseconds
        self.policy = policy
        self.priority = priority
        self.hgrmDirectory = hgrmDirectory
        self.memoryLocked = memoryLocked
        self.dmaLatencyHeld = dmaLatencyHeld
        self.breaktraceNanoseconds = breaktraceNanoseconds
    }

    init(from decoder: any Decoder) throws {
        self.measurement = try JitterConfiguration(from: decoder)
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.load = try container.decode(Int.self, forKey: .load)
        self.rounds = try container.decode(Int.self, forKey: .rounds)
        self.backends = try container.decode([String].self, forKey: .backends)
        self.threads = try container.decode(Int.self, forKey: .threads)
        self.affinity = try container.decodeIfPresent([Int].self, forKey: .affinity)
        self.smp = try container.decode(Bool.self, forKey: .smp)
        self.spinNanoseconds = try container.decode(Int64.self, forKey: .spinNanoseconds)
        self.policy = try container.decode(SchedulingPolicy.self, forKey: .policy)
        self.priority = try container.decode(Int.self, forKey: .priority)
        self.hgrmDirectory = try container.decodeIfPresent(String.self, forKey: .hgrmDirectory)
        self.memoryLocked = try container.decode(Bool.self, forKey: .memoryLocked)
        self.dmaLatencyHeld = try container.decode(Bool.self, forKey: .dmaLatencyHeld)
        self.breaktraceNanoseconds = try container.decodeIfPresent(Int64.self, forKey: .breaktraceNanoseconds)
    }

    func encode(to encoder: any Encoder) throws {
        try self.measurement.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(self.load, forKey: .load)
        try container.encode(self.rounds, forKey: .rounds)
        try container.encode(self.backends, forKey: .backends)
        try container.encode(self.threads, forKey: .threads)
        try container.encodeIfPresent(self.affinity, forKey: .affinity)
        try container.encode(self.smp, forKey: .smp)
        try container.encode(self.spinNanoseconds, forKey: .spinNanoseconds)
        try container.encode(self.policy, forKey: .policy)
        try container.encode(self.priority, forKey: .priority)
        try container.encodeIfPresent(self.hgrmDirectory, forKey: .hgrmDirectory)
        try container.encode(self.memoryLocked, forKey: .memoryLocked)
        try container.encode(self.dmaLatencyHeld, forKey: .dmaLatencyHeld)
        try container.encodeIfPresent(self.breaktraceNanoseconds, forKey: .breaktraceNanoseconds)
    }
}
