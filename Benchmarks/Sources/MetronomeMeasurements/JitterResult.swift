/// One backend's row in a jitter report.
///
/// The JSON keys are a stable schema that other tools read: `backend`, `samples`, `min_us`,
/// `mean_us`, `stddev_us`, `p50_us`, `p90_us`, `p99_us`, `p999_us`, `max_us`, `missed`, `early`,
/// `wakeups_per_s`, `cpu_ms_per_1k`, `rounds` (each round's percentiles alone), and `threads`
/// (each measuring thread's worst case) when the subject ran on measuring threads of its own.
public struct JitterResult: Codable, Sendable, Equatable {
    /// The subject's name.
    public var backend: String
    /// Samples recorded after the warm-up.
    public var samples: Int
    /// Smallest lateness, µs.
    public var minMicroseconds: Double
    /// Mean lateness, µs.
    public var meanMicroseconds: Double
    /// Standard deviation of lateness, µs.
    public var standardDeviationMicroseconds: Double
    /// Median lateness, µs.
    public var p50Microseconds: Double
    /// 90th percentile of lateness, µs.
    public var p90Microseconds: Double
    /// 99th percentile of lateness, µs.
    public var p99Microseconds: Double
    /// 99.9th percentile of lateness, µs.
    public var p999Microseconds: Double
    /// Largest lateness, µs.
    public var maxMicroseconds: Double
    /// Deadlines skipped because a firing came more than an interval late.
    public var missed: Int
    /// Firings before their deadline; anything but 0 is a bug in the backend.
    public var early: Int
    /// Wake-ups per second of run time: the subject's own count, or the process's voluntary
    /// context switches where it has none.
    public var wakeupsPerSecond: Double
    /// CPU milliseconds the process spent per 1000 firings, load threads excluded.
    public var cpuMillisecondsPer1k: Double
    /// Each round's samples alone, in the order they ran, so that a reader sees how far the
    /// rounds spread; `nil` where the result was not measured in rounds.
    public var rounds: [JitterRound]?
    /// Each measuring thread's part, or `nil` when the subject was measured as a whole.
    public var threads: [JitterThreadResult]?
    /// The subject's own remark about the run; not part of the JSON row, reports collect it
    /// into their `notes`.
    public var note: String?

    /// Creates a result from a recorder's summary and the run's costs.
    ///
    /// Latencies stay exact to the nanosecond; wake-ups per second are rounded to 0.1 and CPU
    /// to the microsecond, so reports carry no noise digits.
    public init(
        backend: String,
        latency: LatencySummary,
        wakeupsPerSecond: Double,
        cpuMillisecondsPer1k: Double,
        note: String? = nil,
        rounds: [JitterRound]? = nil,
        threads: [JitterThreadResult]? = nil
    ) {
        self.backend = backend
        self.samples = latency.samples
        self.minMicroseconds = latency.minMicroseconds
        // Rounded to the nanosecond, as the percentiles are.
        self.meanMicroseconds = latency.meanMicroseconds.rounded(toPlaces: 3)
        self.standardDeviationMicroseconds = latency.standardDeviationMicroseconds.rounded(toPlaces: 3)
        self.p50Microseconds = latency.p50Microseconds
        self.p90Microseconds = latency.p90Microseconds
        self.p99Microseconds = latency.p99Microseconds
        self.p999Microseconds = latency.p999Microseconds
        self.maxMicroseconds = latency.maxMicroseconds
        self.missed = latency.missed
        self.early = latency.early
        self.wakeupsPerSecond = wakeupsPerSecond.rounded(toPlaces: 1)
        self.cpuMillisecondsPer1k = cpuMillisecondsPer1k.rounded(toPlaces: 3)
        self.note = note
        self.rounds = rounds
        self.threads = threads
    }

    enum CodingKeys: String, CodingKey {
        case backend
        case samples
        case minMicroseconds = "min_us"
        case meanMicroseconds = "mean_us"
        case standardDeviationMicroseconds = "stddev_us"
        case p50Microseconds = "p50_us"
        case p90Microseconds = "p90_us"
        case p99Microseconds = "p99_us"
        case p999Microseconds = "p999_us"
        case maxMicroseconds = "max_us"
        case missed
        case early
        case wakeupsPerSecond = "wakeups_per_s"
        case cpuMillisecondsPer1k = "cpu_ms_per_1k"
        case rounds
        case threads
    }
}

/// One round of a backend's jitter run: its share of the samples, summarised alone.
///
/// JSON keys: `samples`, `p50_us`, `p99_us`, `max_us`.
public struct JitterRound: Codable, Sendable, Equatable {
    /// Samples recorded in the round.
    public var samples: Int
    /// Median lateness in the round, µs.
    public var p50Microseconds: Double
    /// 99th percentile of lateness in the round, µs.
    public var p99Microseconds: Double
    /// Largest lateness in the round, µs.
    public var maxMicroseconds: Double

    /// The round's figures from its recorder's summary.
    public init(_ latency: LatencySummary) {
        self.samples = latency.samples
        self.p50Microseconds = latency.p50Microseconds
        self.p99Microseconds = latency.p99Microseconds
        self.maxMicroseconds = latency.maxMicroseconds
    }

    enum CodingKeys: String, CodingKey {
        case samples
        case p50Microseconds = "p50_us"
        case p99Microseconds = "p99_us"
        case maxMicroseconds = "max_us"
    }
}

extension Double {
    /// This value rounded half away from zero to `places` decimals.
    func rounded(toPlaces places: Int) -> Double {
        var scale = 1.0
        for _ in 0..<places { scale *= 10 }
        return (self * scale).rounded() / scale
    }
}
