@preconcurrency import Dispatch
import MetronomeMeasurements

/// Raw `DispatchSourceTimer`s, scaled down (`--gcd-timers`): a source per timer.
public struct DispatchScaleSubject: ScaleSubject {
    public let name = "gcd"

    public init() {}

    public func run(_ config: ScaleConfiguration) throws -> ScaleResult {
        let queue = DispatchQueue(label: "metronome.scale.gcd")
        var random = SplitMix64(seed: config.seed)
        let base = MonotonicTime.now()
        let n = config.gcdTimers
        let ops = min(config.operations, config.gcdTimers)
        let log = FireLog(expected: n)
        func source(deadline: Int64) -> any DispatchSourceTimer {
            let source = DispatchSource.makeTimerSource(queue: queue)
            source.schedule(deadline: DispatchTime(uptimeNanoseconds: UInt64(deadline)), leeway: .nanoseconds(0))
            // GCD reports no firing time: the handler reads the clock, after the queue hop.
            source.setEventHandler {
                log.record(scheduledNanoseconds: deadline, firedNanoseconds: MonotonicTime.now())
            }
            source.activate()
            return source
        }

        let before = ScaleProbe.residentBytes()
        var sources = (0..<n).map { _ in source(deadline: ScaleProbe.farDeadline(&random, base: base)) }
        let bytes = Double(ScaleProbe.residentBytes() - before) / Double(n)
        // GCD's add+cancel: a new source armed, then cancelled (a source cannot be disarmed).
        let addCancel = ScaleProbe.rate(ops) { _ in
            source(deadline: ScaleProbe.farDeadline(&random, base: base)).cancel()
        }
        let (reschedule, rescheduleLater) = ScaleProbe.rescheduleRates(
            ops, among: n, config, base: base, random: &random
        ) { index, deadline in
            sources[index].schedule(deadline: DispatchTime(uptimeNanoseconds: UInt64(deadline)))
        }
        sources.forEach { $0.cancel() }

        let first = ScaleProbe.fireStart(timers: n, armingRate: addCancel)
        sources = (0..<n).map { _ in
            source(deadline: ScaleProbe.fireDeadline(after: first, config, &random))
        }
        log.waitUntilComplete(timeoutSeconds: 120)
        sources.forEach { $0.cancel() }
        return ScaleProbe.result(
            self.name, timers: n, addCancel: addCancel, allCores: nil, reschedule: reschedule, later: rescheduleLater,
            bytes: bytes, log: log, firstDeadline: first)
    }
}
