/// What a jitter run was asked for beyond the measurement's settings (load, rounds,
/// backends, the measuring threads and their CPUs, engine-spin's window, the policy and
/// priority of engine-rt and cyclictest, the histogram directory, the break threshold), and
/// whether memory was locked and `/dev/cpu_dma_latency` held.
struct JitterSettings: Codable, Sendable {
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
}
