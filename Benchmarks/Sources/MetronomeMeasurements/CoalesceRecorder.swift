import Synchronization

/// Collects when each one-shot timer fired relative to its window `[deadline, deadline + leeway]`.
///
/// Every firing is classified as early (before its deadline), in window, or late (after the
/// window closed), and its lateness past the deadline goes into a ``LatencyRecorder`` for
/// percentiles. ``waitUntilComplete(timeout:)`` returns once every timer has fired.
public final class CoalesceRecorder: Sendable {
    /// How late a firing may be and still count as in window, in nanoseconds.
    public let leewayNanoseconds: Int64
    private let latency: LatencyRecorder
    private let inWindowCount = Atomic<Int>(0)
    private let lateCount = Atomic<Int>(0)

    /// Creates a recorder expecting `timers` firings.
    ///
    /// - Parameters:
    ///   - timers: Firings after which the recorder is complete.
    ///   - leewayNanoseconds: The window's length past each deadline.
    public init(timers: Int, leewayNanoseconds: Int64) {
        self.leewayNanoseconds = leewayNanoseconds
        self.latency = LatencyRecorder(target: timers)
    }

    /// Records one timer's firing; call it at handler entry.
    ///
    /// - Parameters:
    ///   - deadlineNanoseconds: The timer's `CLOCK_MONOTONIC` deadline.
    ///   - firedNanoseconds: `MonotonicTime.now()` at handler entry.
    public func record(deadlineNanoseconds: Int64, firedNanoseconds: Int64) {
        // Classify before the latency recorder can complete, so a waiter that wakes on completion
        // sees every count.
        // Early firings are counted by the latency recorder.
        if firedNanoseconds >= deadlineNanoseconds {
            if firedNanoseconds - deadlineNanoseconds <= self.leewayNanoseconds {
                self.inWindowCount.add(1, ordering: .relaxed)
            } else {
                self.lateCount.add(1, ordering: .relaxed)
            }
        }
        self.latency.record(scheduledNanoseconds: deadlineNanoseconds, firedNanoseconds: firedNanoseconds, missed: 0)
    }

    /// Waits until every timer has fired.
    ///
    /// - Parameter timeout: The longest to wait.
    /// - Returns: `true` once complete, `false` if `timeout` passed first.
    public func waitUntilComplete(timeout: Duration) -> Bool {
        self.latency.waitUntilComplete(timeout: timeout)
    }

    /// Firings before their deadline.
    public var early: Int { self.latency.summary.early }
    /// Firings within `[deadline, deadline + leeway]`.
    public var inWindow: Int { self.inWindowCount.load(ordering: .relaxed) }
    /// Firings after `deadline + leeway`.
    public var late: Int { self.lateCount.load(ordering: .relaxed) }
    /// Every firing recorded so far.
    public var firings: Int { self.latency.firings }
    /// Percentiles of lateness past the deadline (early firings count as 0).
    public var summary: LatencySummary { self.latency.summary }

    /// Writes the lateness distribution as an HdrHistogram `.hgrm` file in microseconds.
    ///
    /// - Throws: The error from writing the file.
    public func writePercentileDistribution(to path: String) throws {
        try self.latency.writePercentileDistribution(to: path)
    }
}
