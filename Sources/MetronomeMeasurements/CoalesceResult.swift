/// One backend's row in a coalesce report.
///
/// The JSON keys are those of ``JitterResult`` plus `wakeups`, `optimum_wakeups`, `in_window`
/// and `late`: `backend`, `samples`, `min_us`, `p50_us`, `p90_us`, `p99_us`, `p999_us`,
/// `max_us`, `missed`, `early`, `wakeups_per_s`, `cpu_ms_per_1k`, `wakeups`,
/// `optimum_wakeups`, `in_window`, `late`. Lateness is measured from each timer's deadline,
/// so firing anywhere in the leeway window counts.
public struct CoalesceResult: Codable, Sendable, Equatable {
    /// The subject's name.
    public var backend: String
    /// Timers that fired.
    public var samples: Int
    /// Smallest lateness past the deadline, µs.
    public var minMicroseconds: Double
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
    /// Always 0 for one-shot timers; kept so both result kinds share their keys.
    public var missed: Int
    /// Firings before their deadline; anything but 0 is a bug in the backend.
    public var early: Int
    /// ``wakeups`` per second of run time.
    public var wakeupsPerSecond: Double
    /// CPU milliseconds the process spent per 1000 firings, load threads excluded.
    public var cpuMillisecondsPer1k: Double
    /// Wake-ups during the run: the subject's own count, or the process's voluntary context
    /// switches where it has none.
    public var wakeups: Int
    /// The fewest wake-ups that could have fired every timer within its leeway.
    public var optimumWakeups: Int
    /// Firings within `[deadline, deadline + leeway]`.
    public var inWindow: Int
    /// Firings after `deadline + leeway`.
    public var late: Int
    /// The subject's own remark about the run; not part of the JSON row, reports collect it
    /// into their `notes`.
    public var note: String?

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
        self.backend = backend
        self.samples = latency.samples
        self.minMicroseconds = latency.minMicroseconds
        self.p50Microseconds = latency.p50Microseconds
        self.p90Microseconds = latency.p90Microseconds
        self.p99Microseconds = latency.p99Microseconds
        self.p999Microseconds = latency.p999Microseconds
        self.maxMicroseconds = latency.maxMicroseconds
        self.missed = latency.missed
        self.early = latency.early
        self.wakeupsPerSecond = wakeupsPerSecond.rounded(toPlaces: 1)
        self.cpuMillisecondsPer1k = cpuMillisecondsPer1k.rounded(toPlaces: 3)
        self.wakeups = wakeups
        self.optimumWakeups = optimumWakeups
        self.inWindow = inWindow
        self.late = late
        self.note = note
    }

    enum CodingKeys: String, CodingKey {
        case backend
        case samples
        case minMicroseconds = "min_us"
        case p50Microseconds = "p50_us"
        case p90Microseconds = "p90_us"
        case p99Microseconds = "p99_us"
        case p999Microseconds = "p999_us"
        case maxMicroseconds = "max_us"
        case missed
        case early
        case wakeupsPerSecond = "wakeups_per_s"
        case cpuMillisecondsPer1k = "cpu_ms_per_1k"
        case wakeups
        case optimumWakeups = "optimum_wakeups"
        case inWindow = "in_window"
        case late
    }
}
