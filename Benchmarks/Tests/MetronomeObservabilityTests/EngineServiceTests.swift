import Logging
import Metrics
import MetricsTestKit
import Metronome
import MetronomeObservability
import ServiceLifecycle
import ServiceLifecycleTestKit
import Testing

/// `TimerEngine` as a swift-service-lifecycle `Service` (the root's `ServiceLifecycle` trait,
/// which this package turns on), and the observability loops ending on graceful shutdown.
/// No wall-clock bound: each test asserts that the group or loop ends at all, within the
/// test's time limit; Benchmarks/README.md has the time a graceful shutdown takes.
@Suite(.serialized)
struct EngineServiceTests {
    /// What a server writes around `exportMetrics`: a service that runs the loop.
    private struct MetricsExporter: Service {
        let engine: TimerEngine
        let factory: TestMetrics

        func run() async {
            await self.engine.exportMetrics(prefix: "service", every: .milliseconds(5), factory: self.factory)
        }
    }

    private struct EventLogger: Service {
        let engine: TimerEngine

        func run() async {
            await self.engine.logEvents(to: Logger(label: "metronome"), every: .milliseconds(5))
        }
    }

    /// A group of an engine and its exporters ends on a graceful shutdown, and the engine is
    /// shut down with it: it arms nothing afterwards.
    @Test(.timeLimit(.minutes(1)))
    func aGroupEndsOnGracefulShutdownAndStopsTheEngine() async throws {
        let engine = try TimerEngine(configuration: .init(name: "served"))
        let metrics = TestMetrics()
        let group = ServiceGroup(
            services: [engine, MetricsExporter(engine: engine, factory: metrics), EventLogger(engine: engine)],
            logger: Logger(label: "group")
        )
        let running = Task { try await group.run() }
        // Both loops pace themselves with a timer on the engine: running once both are armed.
        while engine.counters.armed < 2 { try await Task.sleep(for: .milliseconds(1)) }
        await group.triggerGracefulShutdown()
        try await running.value
        let timer = SafeDispatchTimer(backend: .engine(engine))
        #expect(!timer.schedule(after: .milliseconds(1)) { _ in }, "the group shut the engine down")
        #expect(engine.counters.armed == 0)
        #expect(try metrics.expectGauge("service_armed_timers", [("engine", "served")]).lastValue != nil)
    }

    /// Cancelling the group's task ends the engine's `run()` too, and shuts it down.
    @Test(.timeLimit(.minutes(1)))
    func cancellationEndsTheEngineService() async throws {
        let engine = try TimerEngine()
        let running = Task { try await engine.run() }
        running.cancel()
        try await running.value
        #expect(!SafeDispatchTimer(backend: .engine(engine)).schedule(after: .seconds(1)) { _ in })
    }

    /// Outside a group too: a graceful shutdown ends both loops, and so does cancellation.
    @Test(.timeLimit(.minutes(1)))
    func theLoopsEndOnGracefulShutdownAndOnCancellation() async throws {
        let engine = try TimerEngine()
        await testGracefulShutdown { trigger in
            let metrics = Task { await engine.exportMetrics(every: .milliseconds(5), factory: TestMetrics()) }
            let events = Task { await engine.logEvents(to: Logger(label: "metronome"), every: .milliseconds(5)) }
            trigger.triggerGracefulShutdown()
            await metrics.value
            await events.value
        }
        let metrics = Task { await engine.exportMetrics(every: .milliseconds(5), factory: TestMetrics()) }
        let events = Task { await engine.logEvents(to: Logger(label: "metronome"), every: .milliseconds(5)) }
        metrics.cancel()
        events.cancel()
        await metrics.value
        await events.value
        #expect(engine.counters.armed == 0)
        await engine.shutdown()
    }

    /// The shared engine in a group ends with the group but goes on running: no library in
    /// the process may stop it under the others.
    @Test(.timeLimit(.minutes(1)))
    func theSharedEngineOutlivesItsGroup() async throws {
        let group = ServiceGroup(services: [TimerEngine.shared], logger: Logger(label: "group"))
        let running = Task { try await group.run() }
        await group.triggerGracefulShutdown()
        try await running.value
        let fired = AsyncStream.makeStream(of: Void.self)
        let timer = SafeDispatchTimer()
        #expect(timer.schedule(after: .milliseconds(1)) { _ in fired.continuation.yield() })
        for await _ in fired.stream { break }
    }
}
