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

// What a server does with timers: a deadline around an async call against its baselines
// (DeadlineBenchmarks.swift); add+cancel on the shared engine from one thread and from two;
// and how long a service group of an engine and its exporter takes to end after a graceful
// shutdown.
func serverBenchmarks() {
    deadlineBenchmarks()
    sharedEngineBenchmarks()
    serviceShutdownBenchmark()
}

// MARK: - Add+cancel from one thread and from two

/// Threads that each schedule and cancel a timer of their own, a share of each iteration
/// apiece, while the benchmark's thread waits. They are started one after the other and
/// each makes its timer before the next starts, so they take consecutive shard tickets:
/// on an engine of as many shards as threads, each thread has a shard of its own, as the
/// threads of a server's pool do.
private final class AddCancelThreads: Sendable {
    /// What the threads read and signal, made before them.
    private final class Orders: Sendable {
        let done = DispatchSemaphore(value: 0)
        let count = Atomic<Int>(0)
        let stopping = Atomic<Bool>(false)
    }

    private let threads: [PosixThread]
    private let starts: [DispatchSemaphore]
    private let orders: Orders

    init(_ threadCount: Int, engine: TimerEngine) throws {
        let starts = (0..<threadCount).map { _ in DispatchSemaphore(value: 0) }
        let made = DispatchSemaphore(value: 0)
        let orders = Orders()
        var threads: [PosixThread] = []
        for start in starts {
            threads.append(
                try PosixThread.spawn {
                    // Made here, on its own thread: its C timer lives in this thread's shard.
                    let timer = SafeDispatchTimer(backend: .engine(engine))
                    AddCancelThreads.addAndCancel(timer, 1)
                    made.signal()
                    while true {
                        start.wait()
                        if orders.stopping.load(ordering: .acquiring) { return }
                        AddCancelThreads.addAndCancel(timer, orders.count.load(ordering: .acquiring))
                        orders.done.signal()
                    }
                })
            made.wait()
        }
        self.threads = threads
        self.starts = starts
        self.orders = orders
    }

    private static func addAndCancel(_ timer: SafeDispatchTimer, _ count: Int) {
        for _ in 0..<count {
            timer.schedule(deadline: .now() + farAway) { _ in }
            timer.cancel()
        }
    }

    /// Runs `total` add+cancel pairs, shared evenly among the threads, and returns when all
    /// are done.
    func run(_ total: Int) {
        self.orders.count.store(total / self.threads.count, ordering: .releasing)
        for start in self.starts { start.signal() }
        for _ in self.threads { self.orders.done.wait() }
    }

    func stop() {
        self.orders.stopping.store(true, ordering: .releasing)
        for start in self.starts { start.signal() }
        for thread in self.threads { thread.join() }
    }
}

private func sharedEngineBenchmarks() {
    let single = try! TimerEngine(configuration: .init(shards: 1))
    for (label, engine) in [("TimerEngine.shared", TimerEngine.shared), ("one-shard engine", single)] {
        for threadCount in [1, 2] {
            let threads = Slot<AddCancelThreads>()
            // A million pairs per iteration: waking the threads is a rounding error.
            Benchmark(
                "Shards: \(label) add+cancel, \(threadCount) thread\(threadCount == 1 ? "" : "s")",
                configuration: .init(scalingFactor: .mega, maxDuration: .seconds(3), maxIterations: 40)
            ) { benchmark in
                threads.value!.run(benchmark.scaledIterations.count)
            } setup: {
                threads.value = try AddCancelThreads(threadCount, engine: engine)
            } teardown: {
                threads.value?.stop()
                threads.value = nil
            }
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
