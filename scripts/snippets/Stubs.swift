// What the documentation's snippets name but do not declare: the reader's own code.
import Metronome

final class Connection: Sendable {
    func close() {}
}

struct Profile {}

struct Profiles: Sendable {
    func load(_ id: Int) async throws -> Profile { Profile() }
}

struct Quotes: Sendable {
    func price(of symbol: String) async throws -> Double { 1 }
}

struct User {}

struct Database: Sendable {
    func user(id: Int) async throws -> User { User() }
}

/// swift-log's, as the observability example uses it.
struct Logger: Sendable {
    init(label: String) {}
}

/// swift-async-algorithms', as the README's frame loop uses it.
struct AsyncTimerSequence<C: Clock>: AsyncSequence, Sendable {
    typealias Element = C.Instant
    init(interval: C.Duration, clock: C) {}
    struct AsyncIterator: AsyncIteratorProtocol {
        mutating func next() async -> C.Instant? { nil }
    }
    func makeAsyncIterator() -> AsyncIterator { AsyncIterator() }
}

/// MetronomeObservability's, under the traits `Metrics` and `Logging`.
extension TimerEngine {
    func exportMetrics() async {}
    func logEvents(to logger: Logger) async {}
}

let connection = Connection()
let profiles = Profiles()
let feeds = Profiles()
let quotes = Quotes()
let database = Database()
let id = 1
let symbol = "ACME"
let cachedPrice = 1.0

func rotateLogs() {}
func frame() {}
func log(_ line: String) {}
func sample() {}
func sendHeartbeat() {}
func sendNextPacket() {}
func flushMetrics(missed: Int) {}

/// swift-service-lifecycle's, as the server article uses it.
protocol Service: Sendable {
    func run() async throws
}

struct ServiceGroup {
    init(services: [any Service], logger: Logger) {}
}

extension TimerEngine: Service {
    func run() async throws {}
}

struct Server: Service {
    func run() async throws {}
}

/// swift-nio's event loop, as far as the server article uses it.
final class EventLoop: SerialExecutor {
    func enqueue(_ job: consuming ExecutorJob) {}
    var executor: any SerialExecutor { self }
    func preconditionInEventLoop() {}
}

let logger = Logger(label: "server")
let server = Server()
let eventLoop = EventLoop()

func flushPendingWrites() {}

/// swift-service-lifecycle's, which ends a sequence at the group's graceful shutdown.
extension AsyncSequence where Self: Sendable, Element: Sendable {
    func cancelOnGracefulShutdown() -> Self { self }
}
