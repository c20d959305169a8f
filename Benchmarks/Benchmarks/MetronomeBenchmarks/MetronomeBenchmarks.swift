import Benchmark
// CMetronome is not a product of the root package; its module map reaches this target
// through Metronome, which is built from it. See README.md.
import CMetronome
import Dispatch
import Glibc
import Metronome
import MetronomeTestSupport
import MetronomeTesting
import Synchronization

// Every benchmark reports allocations, throughput and wall clock. mallocCountTotal counts
// every thread's mallocs, so the firing thread's own allocations are included.
// Budget: at most 2 s of measurement per benchmark, about 15 benchmarks.
let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.mallocCountTotal, .throughput, .wallClock],
        warmupIterations: 10,
        scalingFactor: .kilo,
        maxDuration: .seconds(2),
        maxIterations: 2_000
    )

    coreBenchmarks()
    swiftBenchmarks()
    manualTimelineBenchmarks()
    serverBenchmarks()
}

// MARK: - C core

/// Counts callbacks; handed to every timer as its context.
final class FireCounter: Sendable {
    let fired = Atomic<Int>(0)

    /// Spins until `target` callbacks ran; the firing thread is the other core.
    func wait(until target: Int) {
        while self.fired.load(ordering: .acquiring) < target {
            sched_yield()
        }
    }
}

private let countFiring: mtr_fire_fn = { context, _ in
    Unmanaged<FireCounter>.fromOpaque(context!).takeUnretainedValue().fired.add(1, ordering: .releasing)
}

/// One C engine with `background` timers armed an hour or two out, so the heap is that deep.
final class CoreFixture: @unchecked Sendable {
    let engine: OpaquePointer
    let counter = FireCounter()
    var random = SplitMix64(seed: 0x6d65_7472_6f6e_6f6d)

    init(background: Int) {
        var config = mtr_engine_config()
        mtr_engine_config_init(&config)
        config.on_fire = countFiring
        var engine: OpaquePointer?
        precondition(mtr_engine_create(&config, &engine) == 0, "mtr_engine_create")
        self.engine = engine!
        let now = Self.now()
        for _ in 0..<background {
            let timer = self.makeTimer()
            precondition(
                mtr_timer_arm_once(self.engine, timer, .MTR_CLOCK_MONOTONIC, self.farDeadline(from: now), 0) == 0)
        }
    }

    deinit {
        mtr_engine_destroy(self.engine)
    }

    static func now() -> Int64 {
        var now: Int64 = 0
        _ = mtr_clock_now(.MTR_CLOCK_MONOTONIC, &now)
        return now
    }

    func makeTimer() -> mtr_timer_id {
        var id: mtr_timer_id = 0
        precondition(mtr_timer_create(self.engine, Unmanaged.passUnretained(self.counter).toOpaque(), &id) == 0)
        return id
    }

    /// A random deadline 1 to 2 hours after `now`: never the heap's top in practice.
    func farDeadline(from now: Int64) -> Int64 {
        now + 3_600_000_000_000 + Int64(self.random.next() % 3_600_000_000_000)
    }
}

/// Holds a benchmark's fixture from its setup to its teardown.
final class Slot<Value>: @unchecked Sendable {
    var value: Value?
}

/// Benchmarks `body` on one timer of a `CoreFixture` with `background` timers armed: the
/// setup makes both and lets `prepare` arm the timer, the teardown drops them.
private func coreTimerBenchmark(
    _ name: String,
    background: Int,
    prepare: @escaping @Sendable (CoreFixture, mtr_timer_id) -> Void = { _, _ in },
    body: @escaping @Sendable (Benchmark, CoreFixture, mtr_timer_id) -> Void
) {
    let slot = Slot<(CoreFixture, mtr_timer_id)>()
    Benchmark(name) { benchmark in
        let (fixture, timer) = slot.value!
        body(benchmark, fixture, timer)
    } setup: {
        let fixture = CoreFixture(background: background)
        let timer = fixture.makeTimer()
        prepare(fixture, timer)
        slot.value = (fixture, timer)
    } teardown: {
        slot.value = nil
    }
}

/// Arms a fixture's timer at a random far deadline.
private let armFar: @Sendable (CoreFixture, mtr_timer_id) -> Void = { fixture, timer in
    _ = mtr_timer_arm_once(fixture.engine, timer, .MTR_CLOCK_MONOTONIC, fixture.farDeadline(from: CoreFixture.now()), 0)
}

private func coreBenchmarks() {
    for background in [0, 1_000_000] {
        let label = background == 0 ? "empty" : "1M armed"

        // add + cancel: a disarmed timer joins the heap at a random far deadline and leaves.
        coreTimerBenchmark("C arm_once+cancel (\(label))", background: background) { benchmark, fixture, timer in
            let now = CoreFixture.now()
            for _ in benchmark.scaledIterations {
                _ = mtr_timer_arm_once(fixture.engine, timer, .MTR_CLOCK_MONOTONIC, fixture.farDeadline(from: now), 0)
                _ = mtr_timer_cancel(fixture.engine, timer)
            }
        }

        // reschedule: an armed timer re-armed at a new random far deadline (a heap move).
        coreTimerBenchmark("C reschedule armed timer (\(label))", background: background, prepare: armFar) {
            benchmark, fixture, timer in
            let now = CoreFixture.now()
            for _ in benchmark.scaledIterations {
                _ = mtr_timer_arm_once(fixture.engine, timer, .MTR_CLOCK_MONOTONIC, fixture.farDeadline(from: now), 0)
            }
        }
    }

    // create + arm + destroy: a timer's whole life, slot reuse included.
    let lifecycle = Slot<CoreFixture>()
    Benchmark("C create+arm_once+destroy (empty)") { benchmark in
        let fixture = lifecycle.value!
        let now = CoreFixture.now()
        for _ in benchmark.scaledIterations {
            let timer = fixture.makeTimer()
            _ = mtr_timer_arm_once(fixture.engine, timer, .MTR_CLOCK_MONOTONIC, fixture.farDeadline(from: now), 0)
            _ = mtr_timer_destroy(fixture.engine, timer)
        }
    } setup: {
        lifecycle.value = CoreFixture(background: 0)
    } teardown: {
        lifecycle.value = nil
    }

    // Fire path: arm N one-shots due now, then wait until all N callbacks ran. The timers
    // exist before measuring; what is measured is arming, the wake-up(s) and the callbacks.
    for (count, scaling) in [(1, BenchmarkScalingFactor.one), (1_000, .kilo)] {
        let fire = Slot<(CoreFixture, [mtr_timer_id])>()
        Benchmark(
            "C fire path (\(count) one-shot\(count == 1 ? "" : "s") due now)",
            configuration: .init(scalingFactor: scaling)
        ) { benchmark in
            let (fixture, timers) = fire.value!
            let target = fixture.counter.fired.load(ordering: .relaxed) + timers.count
            let now = CoreFixture.now()
            for timer in timers {
                _ = mtr_timer_arm_once(fixture.engine, timer, .MTR_CLOCK_MONOTONIC, now, 0)
            }
            fixture.counter.wait(until: target)
        } setup: {
            let fixture = CoreFixture(background: 0)
            fire.value = (fixture, (0..<count).map { _ in fixture.makeTimer() })
        } teardown: {
            fire.value = nil
        }
    }
}

// MARK: - SafeDispatchTimer on the engine

let farAway = DispatchTimeInterval.seconds(3_600)

/// Arms a timer an hour out, so that nothing fires while measuring.
private let armFarAway: @Sendable (SafeDispatchTimer) -> Void = { $0.schedule(deadline: .now() + farAway) { _ in } }

/// Arms a timer to repeat every hour from an hour out.
private let armRepeatingFarAway: @Sendable (SafeDispatchTimer) -> Void = {
    $0.schedule(deadline: .now() + farAway, repeating: farAway) { _ in }
}

/// Benchmarks `body` on one `SafeDispatchTimer` on the backend `makeBackend` returns: the
/// setup makes the timer and lets `prepare` arm it, the teardown drops it (and an engine
/// made for it with it).
private func timerBenchmark(
    _ name: String,
    on makeBackend: @escaping @Sendable () throws -> SafeDispatchTimer.Backend,
    prepare: @escaping @Sendable (SafeDispatchTimer) -> Void = { _ in },
    body: @escaping @Sendable (Benchmark, SafeDispatchTimer) -> Void
) {
    let timerSlot = Slot<SafeDispatchTimer>()
    Benchmark(name) { benchmark in
        body(benchmark, timerSlot.value!)
    } setup: {
        let timer = SafeDispatchTimer(backend: try makeBackend())
        prepare(timer)
        timerSlot.value = timer
    } teardown: {
        timerSlot.value = nil
    }
}

/// An engine of the timer's own.
private let ownEngine: @Sendable () throws -> SafeDispatchTimer.Backend = { .engine(try TimerEngine()) }

private func swiftBenchmarks() {
    let engineSlot = Slot<TimerEngine>()
    let makeEngine: @Sendable () throws -> Void = { engineSlot.value = try TimerEngine() }
    let dropEngine: @Sendable () -> Void = { engineSlot.value = nil }

    timerBenchmark("SafeDispatchTimer schedule+cancel (engine)", on: ownEngine) { benchmark, timer in
        for _ in benchmark.scaledIterations {
            timer.schedule(deadline: .now() + farAway) { _ in }
            timer.cancel()
        }
    }

    timerBenchmark("SafeDispatchTimer reschedule (engine)", on: ownEngine, prepare: armFarAway) { benchmark, timer in
        var random = SplitMix64(seed: 42)
        for _ in benchmark.scaledIterations {
            timer.reschedule(deadline: .now() + farAway + .nanoseconds(Int(random.next() % 1_000_000_000)))
        }
    }

    // A running one-shot pushed later, as an idle timeout is on every request: the deadline
    // word in the timer moves; no lock, no allocation, no engine call.
    timerBenchmark("SafeDispatchTimer push later (engine)", on: ownEngine, prepare: armFarAway) { benchmark, timer in
        var deadline = DispatchTime.now() + farAway
        for _ in benchmark.scaledIterations {
            deadline = deadline + .nanoseconds(1)
            blackHole(timer.reschedule(deadline: deadline))
        }
    }

    // A touch records the value's new expiry in one atomic word and leaves the value in the
    // list of the millisecond it was due in (an hour out): no allocation, no lock, no engine
    // call.
    let valueSlot = Slot<ExpiringValue<Int>>()
    Benchmark("ExpiringValue touch (engine)") { benchmark in
        let value = valueSlot.value!
        for _ in benchmark.scaledIterations {
            blackHole(value.touch())
        }
    } setup: {
        try makeEngine()
        valueSlot.value = ExpiringValue(0, lifetime: .seconds(3_600), backend: .engine(engineSlot.value!))
    } teardown: {
        valueSlot.value = nil
        dropEngine()
    }

    timerBenchmark("SafeDispatchTimer suspend+resume (engine)", on: ownEngine, prepare: armRepeatingFarAway) {
        benchmark, timer in
        for _ in benchmark.scaledIterations {
            timer.suspend()
            timer.resume()
        }
    }

    // The Swift fire path: a repeating 20 µs timer on the firing thread (queue nil); the
    // iteration waits for 1,000 handler calls. Nothing but firings happens while measuring.
    let firingSlot = Slot<(SafeDispatchTimer, FireCounter)>()
    Benchmark(
        "SafeDispatchTimer fire path (engine, repeating 20 µs)",
        configuration: .init(scalingFactor: .kilo)
    ) { benchmark in
        let (_, counter) = firingSlot.value!
        let target = counter.fired.load(ordering: .relaxed) + benchmark.scaledIterations.count
        counter.wait(until: target)
    } setup: {
        try makeEngine()
        let timer = SafeDispatchTimer(backend: .engine(engineSlot.value!))
        let counter = FireCounter()
        timer.schedule(deadline: .now(), repeating: .microseconds(20)) { _ in
            counter.fired.add(1, ordering: .releasing)
        }
        firingSlot.value = (timer, counter)
    } teardown: {
        await firingSlot.value?.0.cancelAndAwaitHandlers()
        firingSlot.value = nil
        dropEngine()
    }
}

// MARK: - SafeDispatchTimer on ManualTimeline: the state machine and lock, no engine

/// A virtual clock of the timer's own, which nothing advances.
private let ownTimeline: @Sendable () -> SafeDispatchTimer.Backend = { .custom(ManualTimeline()) }

/// Arms a timer to repeat every hour.
private let armHourly: @Sendable (SafeDispatchTimer) -> Void = { $0.schedule(interval: 3_600) {} }

private func manualTimelineBenchmarks() {
    timerBenchmark("SafeDispatchTimer suspend+resume (ManualTimeline)", on: ownTimeline, prepare: armHourly) {
        benchmark, timer in
        for _ in benchmark.scaledIterations {
            timer.suspend()
            timer.resume()
        }
    }

    // Rejected transitions: the machine answers .reject and nothing is armed or disarmed.
    timerBenchmark("SafeDispatchTimer rejected resume+cancel (ManualTimeline, idle)", on: ownTimeline) {
        benchmark, timer in
        for _ in benchmark.scaledIterations {
            blackHole(timer.resume())
            blackHole(timer.cancel())
        }
    }

    timerBenchmark("SafeDispatchTimer schedule+cancel (ManualTimeline)", on: ownTimeline) { benchmark, timer in
        for _ in benchmark.scaledIterations {
            timer.schedule(interval: 3_600) {}
            timer.cancel()
        }
    }
}
