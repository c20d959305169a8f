/// One measuring thread's part of a subject's result: cyclictest's per-thread line, whose
/// `Max` shows a thread (or a CPU) that is worse than the rest, which the merged
/// distribution hides.
///
/// The JSON keys are `thread`, `cpu` (`null` when the thread was not pinned), `samples` and
/// `max_us`.
public struct JitterThreadResult: Codable, Sendable, Equatable {
    /// The thread's number, from 0.
    public var thread: Int
    /// The CPU the thread was pinned to, or `nil` when the backend cannot pin it.
    public var cpu: Int?
    /// Samples the thread recorded after its warm-up.
    public var samples: Int
    /// The thread's largest lateness, µs.
    public var maxMicroseconds: Double

    /// Creates a thread's result from its fields.
    public init(thread: Int, cpu: Int?, samples: Int, maxMicroseconds: Double) {
        self.thread = thread
        self.cpu = cpu
        self.samples = samples
        self.maxMicroseconds = maxMicroseconds
    }

    /// The thread's result from what its own recorder holds.
    public init(thread: Int, cpu: Int?, recorder: LatencyRecorder) {
        let summary = recorder.summary
        self.init(thread: thread, cpu: cpu, samples: summary.samples, maxMicroseconds: summary.maxMicroseconds)
    }

    /// The same threads over two rounds: samples added, the larger maximum; `nil` stands for
    /// no round yet.
    static func adding(_ rounds: [JitterThreadResult]?, _ round: [JitterThreadResult]?) -> [JitterThreadResult]? {
        guard let rounds, let round else { return rounds ?? round }
        return zip(rounds, round).map { total, next in
            JitterThreadResult(
                thread: total.thread, cpu: total.cpu, samples: total.samples + next.samples,
                maxMicroseconds: max(total.maxMicroseconds, next.maxMicroseconds))
        }
    }

    enum CodingKeys: String, CodingKey {
        case thread, cpu, samples
        case maxMicroseconds = "max_us"
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(self.thread, forKey: .thread)
        // null rather than absent: an unpinned thread is a fact of the run, not a missing value.
        try container.encode(self.cpu, forKey: .cpu)
        try container.encode(self.samples, forKey: .samples)
        try container.encode(self.maxMicroseconds, forKey: .maxMicroseconds)
    }
}
