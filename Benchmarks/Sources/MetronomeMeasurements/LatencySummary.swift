/// Lateness percentiles of one run, in nanoseconds, with the run's miss and early counts.
///
/// Percentiles come from an HdrHistogram with 3 significant digits, so each value is exact to
/// within 0.1 %. An early firing counts as lateness 0 in the percentiles.
public struct LatencySummary: Sendable, Equatable {
    /// Firings recorded: warm-up excluded, at most the recorder's target.
    public var samples: Int
    /// The smallest lateness recorded.
    public var minNanoseconds: Int64
    /// The median lateness.
    public var p50Nanoseconds: Int64
    /// The 90th percentile of lateness.
    public var p90Nanoseconds: Int64
    /// The 99th percentile of lateness.
    public var p99Nanoseconds: Int64
    /// The 99.9th percentile of lateness.
    public var p999Nanoseconds: Int64
    /// The largest lateness recorded.
    public var maxNanoseconds: Int64
    /// Deadlines that passed without a firing of their own, summed over the recorded firings.
    public var missed: Int
    /// Recorded firings that came before their deadline.
    public var early: Int
    /// The mean lateness; beside the percentiles so that results compare with tools that
    /// print only a mean (cyclictest's `Avg`).
    public var meanNanoseconds: Double = 0
    /// The standard deviation of lateness.
    public var standardDeviationNanoseconds: Double = 0

    /// ``minNanoseconds`` in microseconds.
    public var minMicroseconds: Double { Self.microseconds(self.minNanoseconds) }
    /// ``p50Nanoseconds`` in microseconds.
    public var p50Microseconds: Double { Self.microseconds(self.p50Nanoseconds) }
    /// ``p90Nanoseconds`` in microseconds.
    public var p90Microseconds: Double { Self.microseconds(self.p90Nanoseconds) }
    /// ``p99Nanoseconds`` in microseconds.
    public var p99Microseconds: Double { Self.microseconds(self.p99Nanoseconds) }
    /// ``p999Nanoseconds`` in microseconds.
    public var p999Microseconds: Double { Self.microseconds(self.p999Nanoseconds) }
    /// ``maxNanoseconds`` in microseconds.
    public var maxMicroseconds: Double { Self.microseconds(self.maxNanoseconds) }

    /// ``meanNanoseconds`` in microseconds.
    public var meanMicroseconds: Double { self.meanNanoseconds / 1_000 }
    /// ``standardDeviationNanoseconds`` in microseconds.
    public var standardDeviationMicroseconds: Double { self.standardDeviationNanoseconds / 1_000 }

    private static func microseconds(_ nanoseconds: Int64) -> Double {
        Double(nanoseconds) / 1_000
    }
}
