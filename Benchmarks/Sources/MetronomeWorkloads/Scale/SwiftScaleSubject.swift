@preconcurrency import Dispatch
import Foundation
import Metronome
import MetronomeMeasurements

/// `SafeDispatchTimer` on the engine: what a Swift user gets.
public struct SwiftScaleSubject: ScaleSubject {
    public let name = "engine-swift"

    public init() {}

    public func run(_ config: ScaleConfiguration) throws -> ScaleResult {
        let engine = try TimerEngine(configuration: .init(shards: config.shards))
        defer { engine.syncShutdown() }
        let log = FireLog(expected: config.timers)
        var random = SplitMix64(seed: config.seed)
        let base = MonotonicTime.now()
        let n = config.timers
        let ops = config.operations
        let record: @Sendable (Tick) -> Void = { tick in
            log.record(scheduledNanoseconds: tick.scheduled.nanoseconds, firedNanoseconds: tick.fired.nanoseconds)
        }

        let before = ScaleProbe.residentBytes()
        let timers = (0..<n).map { _ in
            let timer = SafeDispatchTimer(backend: .engine(engine))
            timer.schedule(at: TimerInstant(nanoseconds: ScaleProbe.farDeadline(&random, base: base)), handler: record)
            return timer
        }
        let bytes = Double(ScaleProbe.residentBytes() - before) / Double(n)

        let probe = SafeDispatchTimer(backend: .engine(engine))
        let addCancel = ScaleProbe.rate(ops) { _ in
            probe.schedule(at: TimerInstant(nanoseconds: ScaleProbe.farDeadline(&random, base: base)), handler: record)
            probe.cancel()
        }
        let threads = ProcessInfo.processInfo.activeProcessorCount
        let allCores = try ScaleProbe.rate(threads: threads, operationsPerThread: ops) { thread in
            var random = SplitMix64(seed: UInt64(thread) &+ 99)
            let timer = SafeDispatchTimer(backend: .engine(engine))
            // A handler of its own, as each connection has: a shared one would make every
            // schedule and cancel retain and release one closure from every thread.
            let handler: @Sendable (Tick) -> Void = { tick in record(tick) }
            for _ in 0..<ops {
                timer.schedule(
                    at: TimerInstant(nanoseconds: ScaleProbe.farDeadline(&random, base: base)), handler: handler)
                timer.cancel()
            }
        }
        let (reschedule, rescheduleLater) = ScaleProbe.rescheduleRates(
            ops, among: n, config, base: base, random: &random
        ) { index, deadline in
            timers[index].reschedule(deadline: DispatchTime(uptimeNanoseconds: UInt64(deadline)))
        }

        let first = ScaleProbe.fireStart(timers: n, armingRate: min(addCancel, reschedule))
        for timer in timers {
            let deadline = ScaleProbe.fireDeadline(after: first, config, &random)
            timer.cancel()
            timer.schedule(at: TimerInstant(nanoseconds: deadline), handler: record)
        }
        // Dropping a SafeDispatchTimer cancels it: keep them until they have fired.
        withExtendedLifetime(timers) { _ = log.waitUntilComplete(timeoutSeconds: 60) }
        return ScaleProbe.result(
            self.name, timers: n, addCancel: addCancel, allCores: allCores, reschedule: reschedule,
            later: rescheduleLater,
            bytes: bytes, log: log, firstDeadline: first)
    }
}
