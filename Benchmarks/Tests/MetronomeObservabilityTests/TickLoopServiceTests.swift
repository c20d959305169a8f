// swift-format-ignore-file
// Its service is the README's checklist block, line for line (the root's
// DocumentationSnippetTests), laid out as the reader sees it.
import Logging
import Metronome
import ServiceLifecycle
import Testing

/// What the README's tick loop calls on each tick.
private func flushMetrics(missed: Int) {}

/// The README's checklist: a tick loop in a service, ended by the group's graceful shutdown.
struct CacheRefresher: Service {
    func run() async {
        for await tick in TimerEngine.shared.ticks(every: .seconds(10)).cancelOnGracefulShutdown() {
            flushMetrics(missed: tick.missed)
        }
    }
}

/// A service that waits for the group's graceful shutdown, as a server does.
private struct Server: Service {
    func run() async throws {
        try await gracefulShutdown()
    }
}

/// A tick loop in a swift-service-lifecycle `Service` ends at the group's graceful shutdown
/// through ServiceLifecycle's `cancelOnGracefulShutdown()`, and leaving the loop disarms its
/// timer. No wall-clock bound: each test asserts that the group ends at all, within the
/// test's time limit.
@Suite(.serialized)
struct TickLoopServiceTests {
    /// Counts its ticks into `ticked`, on an engine of the test's own so its timers can be
    /// counted.
    private struct Sampler: Service {
        let engine: TimerEngine
        let endsOnGracefulShutdown: Bool
        let ticked: AsyncStream<Void>.Continuation

        func run() async {
            let ticks = self.engine.ticks(every: .milliseconds(5))
            if self.endsOnGracefulShutdown {
                for await _ in ticks.cancelOnGracefulShutdown() { self.ticked.yield() }
            } else {
                for await _ in ticks { self.ticked.yield() }
            }
            self.ticked.finish()
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func theReadmeServiceEndsWithItsGroup() async throws {
        let group = ServiceGroup(services: [CacheRefresher(), Server()], logger: Logger(label: "group"))
        let running = Task { try await group.run() }
        await group.triggerGracefulShutdown()
        try await running.value
    }

    /// The loop ticks until the graceful shutdown, then ends, and its timer is disarmed.
    @Test(.timeLimit(.minutes(1)))
    func aTickLoopEndsAtGracefulShutdownAndDisarms() async throws {
        let engine = try TimerEngine(configuration: .init(name: "sampled"))
        let (ticked, continuation) = AsyncStream.makeStream(of: Void.self)
        let sampler = Sampler(engine: engine, endsOnGracefulShutdown: true, ticked: continuation)
        let group = ServiceGroup(services: [sampler, Server()], logger: Logger(label: "group"))
        let running = Task { try await group.run() }
        var ticks = ticked.makeAsyncIterator()
        for _ in 0..<2 { #expect(await ticks.next() != nil, "the loop ended before the shutdown") }
        await group.triggerGracefulShutdown()
        try await running.value
        while await ticks.next() != nil {}
        // The sequence's timer is disarmed when its iteration, in a task of the merge's, ends.
        while engine.counters.armed > 0 { try await Task.sleep(for: .milliseconds(1)) }
        await engine.shutdown()
    }

    /// Without `cancelOnGracefulShutdown()` the loop goes on ticking after the graceful
    /// shutdown began, and the group waits for it: only cancelling the group ends it.
    @Test(.timeLimit(.minutes(1)))
    func withoutItTheLoopHoldsTheGroupUp() async throws {
        let engine = try TimerEngine(configuration: .init(name: "sampled"))
        // Keeping only the newest tick, at most one of those read after the trigger came before it.
        let (ticked, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let sampler = Sampler(engine: engine, endsOnGracefulShutdown: false, ticked: continuation)
        let group = ServiceGroup(services: [sampler, Server()], logger: Logger(label: "group"))
        let running = Task { try await group.run() }
        var ticks = ticked.makeAsyncIterator()
        #expect(await ticks.next() != nil)
        await group.triggerGracefulShutdown()
        for _ in 0..<3 { #expect(await ticks.next() != nil, "the loop ended without cancelOnGracefulShutdown") }
        running.cancel()
        _ = try? await running.value
        while await ticks.next() != nil {}
        while engine.counters.armed > 0 { try await Task.sleep(for: .milliseconds(1)) }
        await engine.shutdown()
    }
}
