import Metronome
import MetronomeMeasurements

/// `SafeDispatchTimer` on an engine of its own, with each of the configured counts of timers
/// armed on it: the engine's rows of the armed-count table, beside NIO's at the same counts.
///
/// Two rows per count, both made from one plain thread as NIO's `nio-thread` rows are:
/// `engine-new` makes a timer for each pair and drops it after the cancel (allocating per
/// pair, as `scheduleTask` does), `engine-reuse` schedules and cancels one timer (as
/// `scheduleCallback` with one handler does).
public struct EngineArmedScaleSubject: ArmedScaleSubject {
    public let name = "engine"

    public init() {}

    public func run(_ config: ScaleConfiguration) throws -> [ArmedScaleResult] {
        try config.armed.flatMap { try self.run(armed: $0, config) }
    }

    private func run(armed: Int, _ config: ScaleConfiguration) throws -> [ArmedScaleResult] {
        let engine = try TimerEngine(configuration: .init(shards: config.shards))
        defer { engine.syncShutdown() }
        let base = MonotonicTime.now()
        var random = SplitMix64(seed: config.seed)
        let before = ScaleProbe.residentBytes()
        let timers = (0..<armed).map { _ in
            let timer = SafeDispatchTimer(backend: .engine(engine))
            timer.schedule(at: .far(&random, base: base)) { _ in }
            return timer
        }
        let bytes = Double(ScaleProbe.residentBytes() - before) / Double(armed)
        let pairs = config.armedOperations
        let limit = config.timeLimitNanoseconds
        let allocating = ScaleProbe.rate(pairs, limitNanoseconds: limit) { _ in
            let timer = SafeDispatchTimer(backend: .engine(engine))
            timer.schedule(at: .far(&random, base: base)) { _ in }
            timer.cancel()
        }
        let probe = SafeDispatchTimer(backend: .engine(engine))
        let reusing = ScaleProbe.rate(pairs, limitNanoseconds: limit) { _ in
            probe.schedule(at: .far(&random, base: base)) { _ in }
            probe.cancel()
        }
        withExtendedLifetime(timers) {}
        return [
            ArmedScaleResult(
                backend: "engine-new", armed: armed, pairs: pairs, perPair: .allocates, rate: allocating,
                bytesPerTimer: bytes),
            ArmedScaleResult(
                backend: "engine-reuse", armed: armed, pairs: pairs, perPair: .reuses, rate: reusing,
                bytesPerTimer: bytes),
        ]
    }
}

extension TimerInstant {
    /// ``ScaleProbe/farDeadline(_:base:)`` on the monotonic clock, as `base` is.
    static func far(_ random: inout SplitMix64, base: Int64) -> TimerInstant {
        TimerInstant(nanoseconds: ScaleProbe.farDeadline(&random, base: base))
    }
}
