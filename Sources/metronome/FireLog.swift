import MetronomeMeasurements
import Synchronization

/// What the fire phase of `metronome scale` observes: lateness (through HdrHistogram),
/// firings out of deadline order, and when the last one ran.
final class FireLog: Sendable {
    let latency: LatencyRecorder
    private let lastScheduled = Atomic<Int64>(.min)
    private let lastFired = Atomic<Int64>(0)
    private let outOfOrderCount = Atomic<Int>(0)

    init(expected: Int) {
        self.latency = LatencyRecorder(target: expected)
    }

    func record(scheduledNanoseconds: Int64, firedNanoseconds: Int64) {
        let previous = self.lastScheduled.exchange(scheduledNanoseconds, ordering: .relaxed)
        if scheduledNanoseconds < previous {
            self.outOfOrderCount.add(1, ordering: .relaxed)
        }
        self.lastFired.max(firedNanoseconds, ordering: .relaxed)
        self.latency.record(scheduledNanoseconds: scheduledNanoseconds, firedNanoseconds: firedNanoseconds, missed: 0)
    }

    var outOfOrder: Int { self.outOfOrderCount.load(ordering: .relaxed) }

    /// Firings per second, from the earliest deadline to the last firing.
    func firesPerSecond(firstDeadlineNanoseconds: Int64) -> Double {
        let span = Double(self.lastFired.load(ordering: .relaxed) - firstDeadlineNanoseconds) / 1e9
        return span > 0 ? Double(self.latency.firings) / span : 0
    }
}
