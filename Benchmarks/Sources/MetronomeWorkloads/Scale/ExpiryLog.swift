import Glibc
import MetronomeMeasurements
import Synchronization

/// The expiries of the sessions left to expire in `metronome scale --workload sessions`:
/// how many times each session expired, and when first.
///
/// Written from one thread at a time (the engine's firing thread, or the serial queue the
/// GCD idiom's work items run on), so a slot needs no lock; the count of records carries
/// the writes to the thread that reads them.
public final class ExpiryLog: @unchecked Sendable {
    private let counts: UnsafeMutableBufferPointer<Int>
    private let firstExpiries: UnsafeMutableBufferPointer<Int64>
    private let recorded = Atomic<Int>(0)
    /// Sessions that should expire: ids `0..<expected`.
    let expected: Int

    init(expected: Int) {
        self.expected = expected
        self.counts = .allocate(capacity: expected)
        self.counts.initialize(repeating: 0)
        self.firstExpiries = .allocate(capacity: expected)
        self.firstExpiries.initialize(repeating: 0)
    }

    deinit {
        self.counts.deallocate()
        self.firstExpiries.deallocate()
    }

    /// Called by each expiry of session `id`.
    public func record(_ id: Int) {
        let now = MonotonicTime.now()
        if self.counts[id] == 0 { self.firstExpiries[id] = now }
        self.counts[id] += 1
        self.recorded.add(1, ordering: .releasing)
    }

    /// Waits, polling every millisecond, until every expected session expired once, or a
    /// session expired twice in their place.
    func waitUntilComplete(timeoutSeconds: Int64) {
        let giveUp = MonotonicTime.now() + timeoutSeconds * 1_000_000_000
        while self.recorded.load(ordering: .acquiring) < self.expected, MonotonicTime.now() < giveUp {
            usleep(1_000)
        }
    }

    /// The expiries against the deadlines the sessions were given (`deadlines[id]`: the
    /// clock read just before the session's last successful touch or its creation, plus
    /// its lifetime; so no earlier than its true deadline, and an early expiry is one).
    func summary(deadlines: [Int64]) -> Summary {
        _ = self.recorded.load(ordering: .acquiring)
        let latency = LatencyRecorder(target: max(self.expected, 1))
        var once = 0
        var twice = 0
        var never = 0
        for id in 0..<self.expected {
            switch self.counts[id] {
            case 0: never += 1
            case 1: once += 1
            default: twice += 1
            }
            if self.counts[id] > 0 {
                latency.record(scheduledNanoseconds: deadlines[id], firedNanoseconds: self.firstExpiries[id], missed: 0)
            }
        }
        return Summary(once: once, moreThanOnce: twice, never: never, latency: latency.summary)
    }

    struct Summary {
        let once: Int
        let moreThanOnce: Int
        let never: Int
        let latency: LatencySummary
    }
}
