import Glibc
import MetronomeMeasurements
import Synchronization

/// What the fire phase of `metronome scale` observes, recorded so that the handler costs
/// next to nothing: each firing claims the next slot and stores two integers. Lateness,
/// order and rate are worked out after the run, so a measuring handler (a lock and a
/// histogram per firing) does not cap the rate it measures.
final class FireLog: @unchecked Sendable {
    /// `expected` (scheduled, fired) pairs, in firing order; written once per slot.
    private let pairs: UnsafeMutableBufferPointer<Int64>
    private let claimed = Atomic<Int>(0)
    private let completed = Atomic<Int>(0)
    let expected: Int

    init(expected: Int) {
        self.expected = expected
        self.pairs = .allocate(capacity: 2 * expected)
        self.pairs.initialize(repeating: 0)
    }

    deinit {
        self.pairs.deallocate()
    }

    /// Called by every firing; firings beyond `expected` are dropped.
    func record(scheduledNanoseconds: Int64, firedNanoseconds: Int64) {
        let slot = self.claimed.add(1, ordering: .relaxed).oldValue
        guard slot < self.expected else { return }
        self.pairs[2 * slot] = scheduledNanoseconds
        self.pairs[2 * slot + 1] = firedNanoseconds
        self.completed.add(1, ordering: .releasing)
    }

    /// Waits, polling every millisecond, until `expected` firings are recorded.
    @discardableResult
    func waitUntilComplete(timeoutSeconds: Int64) -> Bool {
        let giveUp = MonotonicTime.now() + timeoutSeconds * 1_000_000_000
        while self.completed.load(ordering: .acquiring) < self.expected {
            if MonotonicTime.now() > giveUp { return false }
            usleep(1_000)
        }
        return true
    }

    /// The recorded firings, summarised; `firstDeadline` starts the rate's clock.
    func summary(firstDeadlineNanoseconds: Int64) -> Summary {
        let count = min(self.completed.load(ordering: .acquiring), self.expected)
        let latency = LatencyRecorder(target: max(count, 1))
        var outOfOrder = 0
        var previous = Int64.min
        var lastFired = firstDeadlineNanoseconds
        for slot in 0..<count {
            let scheduled = self.pairs[2 * slot]
            let fired = self.pairs[2 * slot + 1]
            if scheduled < previous { outOfOrder += 1 }
            previous = scheduled
            lastFired = max(lastFired, fired)
            latency.record(scheduledNanoseconds: scheduled, firedNanoseconds: fired, missed: 0)
        }
        let span = Double(lastFired - firstDeadlineNanoseconds) / 1e9
        return Summary(
            latency: latency.summary,
            firesPerSecond: span > 0 ? Double(count) / span : 0,
            outOfOrder: outOfOrder
        )
    }

    struct Summary {
        let latency: LatencySummary
        let firesPerSecond: Double
        /// Firings whose deadline is earlier than the one fired before it.
        let outOfOrder: Int
    }
}
