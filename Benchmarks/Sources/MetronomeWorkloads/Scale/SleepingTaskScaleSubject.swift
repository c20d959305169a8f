import Glibc
import MetronomeMeasurements
import Synchronization

/// The Swift-concurrency idiom for a timeout: a `Task` per timeout sleeping in
/// `Task.sleep(for:)`, cancelled when the timeout is no longer needed.
///
/// Rows `task-sleep`, one per configured count of tasks left sleeping beside the pairs. A
/// pair is a sleeping task made and cancelled from a plain thread; a run ends when every
/// task it cancelled has finished, so the work the cooperative pool does for them is
/// counted. Bytes per timer are per sleeping task.
public struct SleepingTaskScaleSubject: ArmedScaleSubject {
    public let name = "task-sleep"

    public init() {}

    public func run(_ config: ScaleConfiguration) throws -> [ArmedScaleResult] {
        try config.armed.map { try self.run(armed: $0, config) }
    }

    private func run(armed: Int, _ config: ScaleConfiguration) throws -> ArmedScaleResult {
        let counts = TaskCounts()
        var random = SplitMix64(seed: config.seed)
        let before = ScaleProbe.residentBytes()
        let sleepers = (0..<armed).map { _ in counts.sleeper(random.farDelay()) }
        guard Self.wait(until: { counts.started.load(ordering: .relaxed) == armed }, seconds: 60) else {
            throw MeasurementError.timedOut(
                backend: self.name, recorded: counts.started.load(ordering: .relaxed), expected: armed)
        }
        // The last tasks to start enqueue their sleeps just after counting themselves.
        usleep(20_000)
        let bytes = Double(ScaleProbe.residentBytes() - before) / Double(armed)
        let rate = ScaleProbe.rate(config.armedOperations, limitNanoseconds: config.timeLimitNanoseconds) { _ in
            counts.created.add(1, ordering: .relaxed)
            counts.sleeper(random.farDelay()).cancel()
        } drain: { deadline in
            Self.wait(until: { counts.finished.load(ordering: .relaxed) == counts.created.load(ordering: .relaxed) }) {
                MonotonicTime.now() > deadline
            }
        }
        sleepers.forEach { $0.cancel() }
        let total = counts.created.load(ordering: .relaxed) + armed
        _ = Self.wait(until: { counts.finished.load(ordering: .relaxed) == total }, seconds: 60)
        return ArmedScaleResult(
            backend: self.name, armed: armed, pairs: config.armedOperations, perPair: .allocates, rate: rate,
            bytesPerTimer: bytes)
    }

    /// Polls `condition` until it holds (`true`) or `expired` does (`false`).
    private static func wait(until condition: () -> Bool, expired: () -> Bool) -> Bool {
        while !condition() {
            if expired() { return false }
            usleep(100)
        }
        return true
    }

    private static func wait(until condition: () -> Bool, seconds: Int64) -> Bool {
        let deadline = MonotonicTime.now() + seconds * 1_000_000_000
        return self.wait(until: condition) { MonotonicTime.now() > deadline }
    }

    /// The tasks of one count: made for pairs, started, finished.
    private final class TaskCounts: Sendable {
        let created = Atomic<Int>(0)
        let started = Atomic<Int>(0)
        let finished = Atomic<Int>(0)

        /// A task sleeping `delay`, as a timeout does, counted as it starts and finishes.
        func sleeper(_ delay: Duration) -> Task<Void, Never> {
            Task {
                self.started.add(1, ordering: .relaxed)
                try? await Task.sleep(for: delay)
                self.finished.add(1, ordering: .relaxed)
            }
        }
    }
}

extension SplitMix64 {
    /// An hour or two, as ``ScaleProbe/farDeadline(_:base:)`` is from its base.
    mutating func farDelay() -> Duration {
        .nanoseconds(ScaleProbe.farDeadline(&self, base: 0))
    }
}
