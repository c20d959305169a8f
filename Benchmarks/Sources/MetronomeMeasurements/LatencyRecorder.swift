import Foundation
import Histogram

/// Collects the lateness of timer firings into an HdrHistogram, from any thread.
///
/// Call ``record(scheduledNanoseconds:firedNanoseconds:missed:)`` first thing in a timer
/// handler, with the deadline that firing was for and `MonotonicTime.now()`. The first
/// `discardFirst` firings are a warm-up and are not recorded; after `target` recorded samples
/// further firings are ignored, so every backend in a comparison reports exactly `target`
/// samples, and ``waitUntilComplete(timeout:)`` returns.
///
/// ```swift
/// let recorder = LatencyRecorder(target: 10_000, discardFirst: 100)
/// // in the handler: recorder.record(scheduledNanoseconds: deadline,
/// //                                 firedNanoseconds: MonotonicTime.now(), missed: 0)
/// guard recorder.waitUntilComplete(timeout: .seconds(30)) else { … }
/// print(recorder.summary.p99Microseconds)
/// ```
public final class LatencyRecorder: Sendable {
    /// Samples after which the recorder is complete.
    public let target: Int
    /// Firings discarded as warm-up before recording starts.
    public let discardFirst: Int
    /// A recorded lateness above this completes the recorder at once (cyclictest's
    /// `--breaktrace`), so a run stops at the first firing that late.
    public let breakAboveNanoseconds: Int64?

    /// The first recorded firing later than ``breakAboveNanoseconds``.
    public struct Break: Sendable, Equatable {
        /// How late it fired.
        public var latenessNanoseconds: Int64
        /// When it fired, `CLOCK_MONOTONIC`.
        public var firedNanoseconds: Int64
        /// Its place among the recorded samples, from 1.
        public var sample: Int
    }

    private struct State {
        var histogram: Histogram<UInt64>
        var firings = 0
        var samples = 0
        var missed = 0
        var early = 0
        var firstBreak: Break?
        /// Set by ``stop()``.
        var stopped = false
    }

    private let state: LockedCondition<State>

    /// Creates an empty recorder.
    ///
    /// - Parameters:
    ///   - target: Samples to record before ``waitUntilComplete(timeout:)`` returns `true`.
    ///   - discardFirst: Warm-up firings to ignore first.
    ///   - breakAboveNanoseconds: If set, the first sample later than this completes the
    ///     recorder and is kept as ``firstBreak``.
    public init(target: Int, discardFirst: Int = 0, breakAboveNanoseconds: Int64? = nil) {
        precondition(target >= 0 && discardFirst >= 0, "target and discardFirst must not be negative")
        self.target = target
        self.discardFirst = discardFirst
        self.breakAboveNanoseconds = breakAboveNanoseconds
        // Sized for an hour up front (about 300 KB): growing it on a first large value
        // would stall the firing path that is being measured.
        var histogram = Histogram<UInt64>(
            highestTrackableValue: 3_600_000_000_000, numberOfSignificantValueDigits: .three)
        histogram.autoResize = true
        self.state = LockedCondition(State(histogram: histogram))
    }

    /// An empty recorder with this one's target, warm-up and break threshold: one measuring
    /// thread's own, to ``merge(_:)`` back into this one.
    public func sibling() -> LatencyRecorder {
        LatencyRecorder(
            target: self.target, discardFirst: self.discardFirst, breakAboveNanoseconds: self.breakAboveNanoseconds)
    }

    /// Records one firing.
    ///
    /// - Parameters:
    ///   - scheduledNanoseconds: The `CLOCK_MONOTONIC` deadline this firing was for. When a
    ///     firing stands for several deadlines, pass the earliest one, so the histogram holds the
    ///     full delay (a 5 ms stall shows as 5 ms, not as less than one interval), and count the
    ///     others in `missed`.
    ///   - firedNanoseconds: `MonotonicTime.now()` at handler entry.
    ///   - missed: Deadlines this firing skipped over (a timerfd expiration count minus one,
    ///     a dispatch source's `data` minus one).
    public func record(scheduledNanoseconds: Int64, firedNanoseconds: Int64, missed: Int) {
        let lateness = firedNanoseconds - scheduledNanoseconds
        let completed: Bool = self.state.withLock { state in
            state.firings += 1
            guard state.firings > self.discardFirst, state.samples < self.target, state.firstBreak == nil,
                !state.stopped
            else { return false }
            if lateness < 0 {
                state.early += 1
            }
            _ = state.histogram.record(UInt64(max(lateness, 0)))
            state.missed += missed
            state.samples += 1
            if let limit = self.breakAboveNanoseconds, lateness > limit {
                state.firstBreak = Break(
                    latenessNanoseconds: lateness, firedNanoseconds: firedNanoseconds, sample: state.samples)
                return true
            }
            return state.samples == self.target
        }
        if completed {
            self.state.broadcast()
        }
    }

    /// Adds everything `other` recorded to this recorder, as if recorded here: how runs made
    /// in rounds become one distribution. The target is not enforced on merged samples.
    public func merge(_ other: LatencyRecorder) {
        let recorded = other.state.withLock { $0 }
        self.state.withLock { state in
            state.histogram.add(recorded.histogram)
            state.firings += recorded.firings
            state.samples += recorded.samples
            state.missed += recorded.missed
            state.early += recorded.early
            if state.firstBreak == nil, var firstBreak = recorded.firstBreak {
                firstBreak.sample += state.samples - recorded.samples
                state.firstBreak = firstBreak
            }
        }
    }

    /// The firing that stopped the run under ``breakAboveNanoseconds``, if one did.
    public var firstBreak: Break? {
        self.state.withLock { $0.firstBreak }
    }

    /// Completes the recorder now, with what it holds: how a break on one measuring thread
    /// ends the others' runs too.
    public func stop() {
        self.state.withLock { $0.stopped = true }
        self.state.broadcast()
    }

    /// Waits until `target` samples have been recorded, or a break or ``stop()``.
    ///
    /// - Parameter timeout: The longest to wait.
    /// - Returns: `true` once complete, `false` if `timeout` passed first.
    public func waitUntilComplete(timeout: Duration) -> Bool {
        self.state.wait(timeout: timeout) { $0.samples >= self.target || $0.firstBreak != nil || $0.stopped }
    }

    /// Whether `target` samples have been recorded, or a break or ``stop()``.
    public var isComplete: Bool {
        self.state.withLock { $0.samples >= self.target || $0.firstBreak != nil || $0.stopped }
    }

    /// Every call to ``record(scheduledNanoseconds:firedNanoseconds:missed:)`` so far,
    /// including warm-up and those past the target: the handler invocations to charge CPU time to.
    public var firings: Int {
        self.state.withLock { $0.firings }
    }

    /// The percentiles and counts of what has been recorded so far.
    public var summary: LatencySummary {
        self.state.withLock { state in
            let histogram = state.histogram
            func percentile(_ value: Double) -> Int64 {
                Int64(clamping: histogram.valueAtPercentile(value))
            }
            return LatencySummary(
                samples: state.samples,
                minNanoseconds: state.samples == 0 ? 0 : Int64(clamping: histogram.min),
                p50Nanoseconds: percentile(50),
                p90Nanoseconds: percentile(90),
                p99Nanoseconds: percentile(99),
                p999Nanoseconds: percentile(99.9),
                maxNanoseconds: Int64(clamping: histogram.max),
                missed: state.missed,
                early: state.early,
                meanNanoseconds: state.samples == 0 ? 0 : histogram.mean,
                standardDeviationNanoseconds: state.samples == 0 ? 0 : histogram.stdDeviation
            )
        }
    }

    /// Writes the lateness distribution as an HdrHistogram percentile file (`.hgrm`).
    ///
    /// Values are in microseconds, the unit HdrHistogram's plotters assume.
    ///
    /// - Parameter path: The file to create or replace.
    /// - Throws: The error from writing the file.
    public func writePercentileDistribution(to path: String) throws {
        let histogram = self.state.withLock { $0.histogram }
        var text = ""
        histogram.outputPercentileDistribution(to: &text, outputValueUnitScalingRatio: 1_000)
        try text.write(toFile: path, atomically: true, encoding: .utf8)
    }
}
