internal import CMetronome
import Foundation
import Metronome
import MetronomeMeasurements

/// The C core through its C API: the floor every other layer adds to.
public struct CoreScaleSubject: ScaleSubject {
    public let name = "core"

    public init() {}

    public func run(_ config: ScaleConfiguration) throws -> ScaleResult {
        var engineConfig = mtr_engine_config()
        mtr_engine_config_init(&engineConfig)
        // Inline on the firing thread; `fired_ns` is the engine's own reading at commit.
        engineConfig.shards = UInt32(clamping: config.shards)
        engineConfig.on_fire = { context, tick in
            // Guaranteed alive by the run: no retain and release per firing.
            Unmanaged<FireLog>.fromOpaque(context!)._withUnsafeGuaranteedRef {
                $0.record(scheduledNanoseconds: tick.pointee.scheduled_ns, firedNanoseconds: tick.pointee.fired_ns)
            }
        }
        var created: OpaquePointer?
        let code = mtr_engine_create(&engineConfig, &created)
        guard code == 0, let engine = created else { throw TimerError(code: code, operation: "mtr_engine_create") }
        defer { mtr_engine_destroy(engine) }
        nonisolated(unsafe) let shared = engine
        let log = FireLog(expected: config.timers)
        let context = Unmanaged.passUnretained(log).toOpaque()
        var random = SplitMix64(seed: config.seed)
        let base = MonotonicTime.now()
        let n = config.timers
        let ops = config.operations

        var ids = [mtr_timer_id](repeating: 0, count: n)
        let before = ScaleProbe.residentBytes()
        for i in 0..<n {
            _ = mtr_timer_create(engine, context, &ids[i])
            _ = mtr_timer_arm_once(engine, ids[i], .MTR_CLOCK_MONOTONIC, ScaleProbe.farDeadline(&random, base: base), 0)
        }
        let bytes = Double(ScaleProbe.residentBytes() - before) / Double(n)

        var probe: mtr_timer_id = 0
        _ = mtr_timer_create(engine, context, &probe)
        let addCancel = ScaleProbe.rate(ops) { _ in
            _ = mtr_timer_arm_once(engine, probe, .MTR_CLOCK_MONOTONIC, ScaleProbe.farDeadline(&random, base: base), 0)
            _ = mtr_timer_cancel(engine, probe)
        }
        let threads = ProcessInfo.processInfo.activeProcessorCount
        let allCores = try ScaleProbe.rate(threads: threads, operationsPerThread: ops) { thread in
            var random = SplitMix64(seed: UInt64(thread) &+ 99)
            var id: mtr_timer_id = 0
            _ = mtr_timer_create(shared, nil, &id)
            for _ in 0..<ops {
                _ = mtr_timer_arm_once(shared, id, .MTR_CLOCK_MONOTONIC, ScaleProbe.farDeadline(&random, base: base), 0)
                _ = mtr_timer_cancel(shared, id)
            }
        }
        let (reschedule, rescheduleLater) = ScaleProbe.rescheduleRates(
            ops, among: n, config, base: base, random: &random
        ) { index, deadline in
            _ = mtr_timer_arm_once(engine, ids[index], .MTR_CLOCK_MONOTONIC, deadline, 0)
        }

        // Fire phase: the same timers re-armed to fall due within the window.
        let first = ScaleProbe.fireStart(timers: n, armingRate: reschedule)
        for id in ids {
            let deadline = ScaleProbe.fireDeadline(after: first, config, &random)
            _ = mtr_timer_arm_once(engine, id, .MTR_CLOCK_MONOTONIC, deadline, 0)
        }
        log.waitUntilComplete(timeoutSeconds: 60)
        return ScaleProbe.result(
            self.name, timers: n, addCancel: addCancel, allCores: allCores, reschedule: reschedule,
            later: rescheduleLater,
            bytes: bytes, log: log, firstDeadline: first)
    }
}
