// swift-format-ignore-file
// Its blocks are MetronomeInAServer.md's code, line for line (the root's
// DocumentationSnippetTests), laid out as the reader sees them. Here rather than in the root's
// ArticleSnippetTests: the service group needs swift-service-lifecycle and the root's
// `ServiceLifecycle` trait, which this package turns on.
import Logging
import Metronome
import MetronomeObservability
import ServiceLifecycle
import Testing

/// What the article's snippets call: a quote service that answers at once or never, and a
/// loader per kind of record.
private struct Quotes: Sendable {
    var answers = true

    func price(of symbol: String) async throws -> Double {
        if !self.answers { try await Task.sleep(for: .seconds(3_600)) }
        return 42
    }
}

private struct Loader: Sendable {
    func load(_ id: Int) async throws -> String { "\(id)" }
}

private final class Connection: Sendable {
    func close() {}
}

// MARK: In a service group

struct MetricsExporter: Service {
    let engine: TimerEngine

    func run() async {
        await engine.exportMetrics()
    }
}

/// A service that waits for the group's graceful shutdown, as a server does.
private struct Server: Service {
    func run() async throws {
        try await gracefulShutdown()
    }
}

@Suite(.serialized)
struct ServerArticleSnippetTests {
    // MARK: Deadlines for async work

    @Test(.timeLimit(.minutes(1)))
    func deadlines() async throws {
        let quotes = Quotes()
        let price = try await withDeadline(in: .milliseconds(200)) {
            try await quotes.price(of: "ACME")
        }
        #expect(price == 42)

        let cached = await Task {
            let quotes = Quotes(answers: false), cachedPrice = 41.0
            func price(of symbol: String) async throws -> Double {
                try await withDeadline(in: .milliseconds(200)) {
                    do {
                        return try await quotes.price(of: symbol)
                    } catch is CancellationError where Task.isEngineDeadlineExpired {
                        return cachedPrice
                    }
                }
            }
            return try await price(of: "ACME")
        }.result
        #expect(try cached.get() == 41)

        let profiles = Loader(), feeds = Loader(), id = 7
        let deadline = ContinuousClock.now + .seconds(2)
        let profile = try await withDeadline(deadline) { try await profiles.load(id) }
        let feed = try await withDeadline(deadline) { try await feeds.load(id) }
        #expect([profile, feed] == ["7", "7"])

        let answer = await Task {
            try await withDeadline(in: .milliseconds(200)) { try await quotes.price(of: "ACME") }
        }.result
        #expect(try answer.get() == 42)
    }

    // MARK: Idle timeouts at scale, periodic work

    @Test(.timeLimit(.minutes(1)))
    func idleTimeoutsAndPeriodicWork() async {
        let connection = Connection()
        let session = ExpiringValue(connection, lifetime: .seconds(30)) { $0.close() }
        session.touch()                                          // on every request
        #expect(session.invalidate() != nil)

        let flushed = AsyncStream.makeStream(of: Int.self)
        func flushMetrics(missed: Int) { flushed.continuation.yield(missed) }
        let flushing = Task {
            for await tick in TimerEngine.shared.ticks(every: .seconds(10), leeway: .milliseconds(100)) {
                flushMetrics(missed: tick.missed)
            }
        }
        flushing.cancel()
        await flushing.value                                     // cancelling the task ends the loop
    }

    // MARK: In a service group

    @Test(.timeLimit(.minutes(1)))
    func serviceGroup() async throws {
        let logger = Logger(label: "server")
        let server = Server()
        let engine = try TimerEngine()
        let group = ServiceGroup(services: [engine, MetricsExporter(engine: engine), server], logger: logger)
        let running = Task { try await group.run() }
        await group.triggerGracefulShutdown()
        try await running.value
        #expect(!SafeDispatchTimer(backend: .engine(engine)).schedule(after: .seconds(1)) { _ in })
    }
}
