internal import CMetronome
@preconcurrency import Dispatch
import Foundation
import Metronome
import MetronomeMeasurements

/// A backend measured by `metronome scale`.
protocol ScaleSubject {
    var name: String { get }
    func run(_ config: ScaleConfiguration) throws -> ScaleResult
}

/// Measurements every subject shares: throughput of a loop, resident memory, threads.
enum ScaleProbe {
    /// Operations per second of `body(i)` for `i` in `0..<count`.
    static func rate(_ count: Int, _ body: (Int) -> Void) -> Double {
        let start = MonotonicTime.now()
        for index in 0..<count { body(index) }
        return Double(count) / (Double(MonotonicTime.now() - start) / 1e9)
    }

    /// Total operations per second of `threads` threads each running `perThread(thread)`.
    static func rate(threads: Int, operationsPerThread: Int, _ perThread: @escaping @Sendable (Int) -> Void) -> Double {
        let group = DispatchGroup()
        let start = MonotonicTime.now()
        for thread in 0..<threads {
            let worker = Thread { perThread(thread); group.leave() }
            group.enter()
            worker.start()
        }
        group.wait()
        return Double(threads * operationsPerThread) / (Double(MonotonicTime.now() - start) / 1e9)
    }

    /// Resident memory of this process, from /proc/self/statm, after handing the pages
    /// earlier phases freed back to the kernel (glibc's `malloc_trim`), so that reusing them
    /// does not hide growth.
    static func residentBytes() -> Int {
        if let trim = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_trim") {
            _ = unsafeBitCast(trim, to: (@convention(c) (Int) -> CInt).self)(0)
        }
        guard let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8),
            let pages = statm.split(separator: " ").dropFirst().first.flatMap({ Int($0) })
        else { return 0 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    /// When the fire phase's first deadline falls: late enough that every timer is armed
    /// before it, so arming never races firing (a timer armed after its deadline would
    /// fire late and out of order). The lead is twice the arming time at `armingRate`,
    /// the rate this backend just showed, so a slow build (a sanitizer) gets a longer one.
    static func fireStart(timers: Int, armingRate: Double) -> Int64 {
        let arming = Double(timers) / max(armingRate, 1) * 1e9
        return MonotonicTime.now() + 200_000_000 + Int64(min(2 * arming, 600e9))
    }

    /// A fire-phase deadline: `first`, plus a random offset within the window.
    static func fireDeadline(after first: Int64, _ config: ScaleConfiguration, _ random: inout SplitMix64) -> Int64 {
        first + (config.fireWindowNanoseconds > 0 ? random.next(below: config.fireWindowNanoseconds) : 0)
    }

    /// A far-future deadline (an hour or two from `base`), so nothing fires while measuring.
    static func farDeadline(_ random: inout SplitMix64, base: Int64) -> Int64 {
        base + 3_600_000_000_000 + random.next(below: 3_600_000_000_000)
    }

    static func result(
        _ name: String, timers: Int, addCancel: Double, allCores: Double?, reschedule: Double?,
        bytes: Double, log: FireLog, firstDeadline: Int64
    ) -> ScaleResult {
        let summary = log.summary(firstDeadlineNanoseconds: firstDeadline)
        return ScaleResult(
            backend: name, timers: timers, addCancelPerSecond: addCancel, addCancelPerSecondAllCores: allCores,
            reschedulePerSecond: reschedule, bytesPerTimer: bytes, fired: summary.latency.samples,
            firesPerSecond: summary.firesPerSecond, outOfOrder: summary.outOfOrder,
            early: summary.latency.early, p50LatenessMicroseconds: summary.latency.p50Microseconds,
            p99LatenessMicroseconds: summary.latency.p99Microseconds
        )
    }
}

/// The C core through its C API: the floor every other layer adds to.
struct CoreScaleSubject: ScaleSubject {
    let name = "core"

    func run(_ config: ScaleConfiguration) throws -> ScaleResult {
        var engineConfig = mtr_engine_config()
        mtr_engine_config_init(&engineConfig)
        // Inline on the firing thread; `fired_ns` is the engine's own reading at commit.
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
        let n = config.timers, ops = config.operations

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
        let allCores = ScaleProbe.rate(threads: threads, operationsPerThread: ops / threads) { thread in
            var random = SplitMix64(seed: UInt64(thread) &+ 99)
            var id: mtr_timer_id = 0
            _ = mtr_timer_create(shared, nil, &id)
            for _ in 0..<(ops / threads) {
                _ = mtr_timer_arm_once(shared, id, .MTR_CLOCK_MONOTONIC, ScaleProbe.farDeadline(&random, base: base), 0)
                _ = mtr_timer_cancel(shared, id)
            }
        }
        let reschedule = ScaleProbe.rate(ops) { _ in
            let id = ids[Int(random.next(below: Int64(n)))]
            _ = mtr_timer_arm_once(engine, id, .MTR_CLOCK_MONOTONIC, ScaleProbe.farDeadline(&random, base: base), 0)
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
            bytes: bytes, log: log, firstDeadline: first)
    }
}

/// `SafeDispatchTimer` on the engine: what a Swift user gets.
struct SwiftScaleSubject: ScaleSubject {
    let name = "engine-swift"

    func run(_ config: ScaleConfiguration) throws -> ScaleResult {
        let engine = try TimerEngine()
        defer { engine.shutdown() }
        let log = FireLog(expected: config.timers)
        var random = SplitMix64(seed: config.seed)
        let base = MonotonicTime.now()
        let n = config.timers, ops = config.operations
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
        let allCores = ScaleProbe.rate(threads: threads, operationsPerThread: ops / threads) { thread in
            var random = SplitMix64(seed: UInt64(thread) &+ 99)
            let timer = SafeDispatchTimer(backend: .engine(engine))
            for _ in 0..<(ops / threads) {
                timer.schedule(at: TimerInstant(nanoseconds: ScaleProbe.farDeadline(&random, base: base)), handler: record)
                timer.cancel()
            }
        }
        let reschedule = ScaleProbe.rate(ops) { _ in
            let deadline = UInt64(ScaleProbe.farDeadline(&random, base: base))
            timers[Int(random.next(below: Int64(n)))].reschedule(deadline: DispatchTime(uptimeNanoseconds: deadline))
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
            bytes: bytes, log: log, firstDeadline: first)
    }
}

/// Raw `DispatchSourceTimer`s, scaled down (`--gcd-timers`): a source per timer.
struct DispatchScaleSubject: ScaleSubject {
    let name = "gcd"

    func run(_ config: ScaleConfiguration) throws -> ScaleResult {
        let queue = DispatchQueue(label: "metronome.scale.gcd")
        var random = SplitMix64(seed: config.seed)
        let base = MonotonicTime.now()
        let n = config.gcdTimers, ops = min(config.operations, config.gcdTimers)
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
        let reschedule = ScaleProbe.rate(ops) { _ in
            let deadline = UInt64(ScaleProbe.farDeadline(&random, base: base))
            sources[Int(random.next(below: Int64(n)))].schedule(deadline: DispatchTime(uptimeNanoseconds: deadline))
        }
        sources.forEach { $0.cancel() }

        let first = ScaleProbe.fireStart(timers: n, armingRate: addCancel)
        sources = (0..<n).map { _ in
            source(deadline: ScaleProbe.fireDeadline(after: first, config, &random))
        }
        log.waitUntilComplete(timeoutSeconds: 120)
        sources.forEach { $0.cancel() }
        return ScaleProbe.result(
            self.name, timers: n, addCancel: addCancel, allCores: nil, reschedule: reschedule,
            bytes: bytes, log: log, firstDeadline: first)
    }
}
