import Benchmark
import Dispatch
import Glibc
import Logging
import Metrics
import Metronome
import MetronomeObservability
import MetronomeTestSupport
import ServiceLifecycle
import Synchronization

// What a server does with timers: a deadline around an async call, against the idiom it
// replaces; add+cancel on the shared engine from one thread and from two; and how long a
// service group of an engine and its exporter takes to end after a graceful shutdown.
func serverBenchmarks() {
    deadlineBenchmarks()
    sharedEngineBenchmarks()
    serviceShutdownBenchmark()
}

// MARK: - A deadline around an async call

/// The idiom a deadline helper replaces: the operation and a `Task.sleep` race as two
/// child tasks of a group, and the first to finish cancels the other.
private func raceAgainstSleep<Success: Sendable>(
    _ timeout: Duration, _ operation: @escaping @Sendable () async throws -> Success
) async throws -> Success {
    try await withThrowingTaskGroup(of: Success.self) { group in
        group.addTask { try await operation() }
        group.addTask {
            try await Task.sleep(for: timeout)
            throw TimeoutError()
        }
        defer { group.cancelAll() }
        return try await group.next()!
    }
}

private func deadlineBenchmarks() {
    let engineSlot = Slot<TimerEngine>()
    Benchmark("Deadline: withTimeout (engine)") { benchmark async in
        let engine = engineSlot.value!
        for index in benchmark.scaledIterations {
            blackHole(try? await withTimeout(.seconds(60), engine: engine) { index })
        }
    } setup: {
        engineSlot.value = try TimerEngine()
    } teardown: {
        await engineSlot.value?.shutdown()
        engineSlot.value = nil
    }

    Benchmark("Deadline: task group racing Task.sleep") { benchmark async in
        for index in benchmark.scaledIterations {
            blackHole(try? await raceAgainstSleep(.seconds(60)) { index })
        }
    }
}

// MARK: - Add+cancel from one thread and from two

/// A second thread that runs a share of each iteration beside the benchmark's own: it
/// spins (yielding) on a generation number, so starting it costs no system call.
private final class PairedThread: Sendable {
    private let generation = Atomic<Int>(0)
    private let count = Atomic<Int>(0)
    private let finished = Atomic<Int>(0)
    private let stopping = Atomic<Bool>(false)
    private let thread = Slot<PosixThread>()

    init(work: @escaping @Sendable (_ count: Int) -> Void) throws {
        self.thread.value = try PosixThread.spawn { [self] in
            var seen = 0
            while !self.stopping.load(ordering: .acquiring) {
                let current = self.generation.load(ordering: .acquiring)
                guard current != seen else {
                    sched_yield()
                    continue
                }
                seen = current
                work(self.count.load(ordering: .relaxed))
                self.finished.store(current, ordering: .releasing)
            }
        }
    }

    /// Runs `mine` here while the other thread runs its work `count` times, and returns once
    /// both are done.
    func run(theirs count: Int, _ mine: () -> Void) {
        self.count.store(count, ordering: .relaxed)
        let round = self.generation.add(1, ordering: .releasing).newValue
        mine()
        while self.finished.load(ordering: .acquiring) != round { sched_yield() }
    }

    func stop() {
        self.stopping.store(true, ordering: .releasing)
        self.thread.value?.join()
    }
}

/// One thread's timer, made on first use by that thread so that it lives in the thread's
/// shard, scheduled an hour out and cancelled `count` times.
private final class AddCancelLoop: @unchecked Sendable {
    private let engine: TimerEngine
    private var timer: SafeDispatchTimer?

    init(engine: TimerEngine) {
        self.engine = engine
    }

    func run(_ count: Int) {
        let timer = self.timer ?? SafeDispatchTimer(backend: .engine(self.engine))
        self.timer = timer
        for _ in 0..<count {
            timer.schedule(deadline: .now() + farAway) { _ in }
            timer.cancel()
        }
    }
}

private func sharedEngineBenchmarks() {
    let single = try! TimerEngine(configuration: .init(shards: 1))
    for (label, engine) in [("TimerEngine.shared", TimerEngine.shared), ("one-shard engine", single)] {
        let mine = Slot<AddCancelLoop>()
        Benchmark("Shards: \(label) add+cancel, 1 thread") { benchmark in
            mine.value!.run(benchmark.scaledIterations.count)
        } setup: {
            mine.value = AddCancelLoop(engine: engine)
        } teardown: {
            mine.value = nil
        }

        let pair = Slot<(PairedThread, AddCancelLoop)>()
        Benchmark("Shards: \(label) add+cancel, 2 threads") { benchmark in
            let (other, loop) = pair.value!
            // The same operations per iteration as one thread, half on each.
            let half = benchmark.scaledIterations.count / 2
            other.run(theirs: benchmark.scaledIterations.count - half) { loop.run(half) }
        } setup: {
            let theirs = AddCancelLoop(engine: engine)
            let other = try PairedThread { theirs.run($0) }
            pair.value = (other, AddCancelLoop(engine: engine))
        } teardown: {
            pair.value?.0.stop()
            pair.value = nil
        }
    }
}

// MARK: - A service group's graceful shutdown

/// What a server writes around `exportMetrics`.
private struct MetricsExporter: Service {
    let engine: TimerEngine

    func run() async {
        await self.engine.exportMetrics(every: .seconds(10), factory: NOOPMetricsHandler.instance)
    }
}

private func serviceShutdownBenchmark() {
    Benchmark(
        "Service: graceful shutdown of engine + exporter",
        configuration: .init(metrics: [.wallClock], scalingFactor: .one, maxDuration: .seconds(5), maxIterations: 200)
    ) { benchmark async in
        guard let engine = try? TimerEngine() else { return }
        let group = ServiceGroup(
            services: [engine, MetricsExporter(engine: engine)], logger: Logger(label: "benchmark"))
        let running = Task { try await group.run() }
        // Running once the exporter's pace is armed.
        while engine.counters.armed == 0 { await Task.yield() }
        benchmark.startMeasurement()
        await group.triggerGracefulShutdown()
        _ = try? await running.value
        benchmark.stopMeasurement()
    }
}
