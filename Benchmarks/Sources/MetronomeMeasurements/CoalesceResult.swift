/// One backend's row in a coalesce report.
///
/// The JSON keys are those of ``JitterResult`` plus `wakeups`, `optimum_wakeups`, `in_window`
/// and `late`: `backend`, `samples`, `min_us`, `p50_us`, `p90_us`, `p99_us`, `p999_us`,
/// `max_us`, `missed`, `early`, `wakeups_per_s`, `cpu_ms_per_1k`, `wakeups`,
/// `optimum_wakeups`, `in_window`, `late`. Lateness is measured from each timer's deadline,
/// so firing anywhere in the leeway window counts.
public struct CoalesceResult: Codable, Sendable, Equatable {
    /// The lateness row, exactly as in a jitter report; lateness is from each deadline.
    public var latency: JitterResult
    /// Wake-ups during the run: the subject's own count, or the process's voluntary context
    /// switches where it has none.
    public var wakeups: Int
    /// The fewest wake-ups that could have fired every timer within its leeway.
    public var optimumWakeups: Int
    /// Firings within `[deadline, deadline + leeway]`.
    public var inWindow: Int
    /// Firings after `deadline + leeway`.
    public var late: Int

    /// The subject's name.
    public var backend: String { self.latency.backend }

    /// Creates a result from a recorder's summary (which supplies `early`), its window counts
    /// and the run's costs.
    ///
    /// Rounding is as in ``JitterResult/init(backend:latency:wakeupsPerSecond:cpuMillisecondsPer1k:note:)``.
    public init(
        backend: String,
        latency: LatencySummary,
        inWindow: Int,
        late: Int,
        wakeups: Int,
        optimumWakeups: Int,
        wakeupsPerSecond: Double,
        cpuMillisecondsPer1k: Double,
        note: String? = nil
    ) {
        self.latency = JitterResult(
            backend: backend,
            latency: latency,
            wakeupsPerSecond: wakeupsPerSecond,
            cpuMillisecondsPer1k: cpuMillisecondsPer1k,
            note: note
        )
        self.wakeups = wakeups
        self.optimumWakeups = optimumWakeups
        self.inWindow = inWindow
        self.late = late
    }

    private enum CodingKeys: String, CodingKey {
        case wakeups
        case optimumWakeups = "optimum_wakeups"
        case inWindow = "in_window"
        case late
    }

    // One flat JSON object: the jitter keys, then the coalesce ones.
    public init(from decoder: any Decoder) throws {
        self.latency = try JitterResult(from: decoder)
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.wakeups = try container.decode(Int.self, forKey: .wakeups)
        self.optimumWakeups = try container.decode(Int.self, forKey: .optimumWakeups)
        self.inWindow = try container.decode(Int.self, forKey: .inWindow)
        self.late = try container.decode(Int.self, forKey: .late)
    }

    public func encode(to encoder: any Encoder) throws {
        try self.latency.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(self.wakeups, forKey: .wakeups)
        try container.encode(self.optimumWakeups, forKey: .optimumWakeups)
        try container.encode(self.inWindow, forKey: .inWindow)
        try container.encode(self.late, forKey: .late)
    }
}
