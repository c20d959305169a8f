// swift-format-ignore-file
// Its blocks are the README's code, line for line (DocumentationSnippetTests), laid out
// as the reader sees them.
import MetronomeTesting
import Testing

// The README's first example, from its imports on.
import Dispatch                                          // DispatchTime, DispatchQueue
import Metronome

// Dropping the poller cancels its timer, in any state.
final class BackgroundPoller: Sendable {
    // Safe from any thread and reusable after cancel, so a `let` will do.
    private let timer = SafeDispatchTimer()              // on the shared engine

    func start() {
        self.timer.schedule(interval: 5.0) { [weak self] in
            self?.fetchData()
        }
    }
    func pause() { self.timer.suspend() }                // no-op unless running
    func unpause() { self.timer.resume() }               // no-op unless suspended
    func stop() { self.timer.cancel() }                  // no-op unless running or suspended
    private func fetchData() {}
}

/// What the deadline block calls: each answers at once with the id it was given.
private struct Database {
    func user(id: Int) async throws -> Int { id }
}

private struct Profiles {
    func load(_ id: Int) async throws -> Int { id }
}

/// The code of the README's ```swift blocks, kept compiling and running here. Each block is
/// copied as the README shows it; what surrounds it makes it checkable. The frame loop over
/// swift-async-algorithms' `AsyncTimerSequence` lives in the Benchmarks package
/// (`EngineClockAsyncAlgorithmsTests`), as do the swift-log and swift-metrics example and the
/// checklist's tick loop in a service (`MetronomeObservabilityTests`).
@Suite
struct ReadmeSnippetTests {
    /// What the snippets wrote with `log(_:)`, in order.
    let logged = AsyncStream.makeStream(of: String.self)
    /// One element per `sample()`.
    let samples = AsyncStream.makeStream(of: Void.self)

    func log(_ line: String) { self.logged.continuation.yield(line) }
    func sample() { self.samples.continuation.yield() }
    func rotateLogs() {}

    func lines(logged count: Int) async -> [String] {
        await self.logged.stream.prefix(count).reduce(into: []) { $0.append($1) }
    }

    // MARK: Using it

    /// The handler holds the poller weakly, so dropping the poller releases it, and its timer
    /// with it, whichever of start, pause, unpause and stop (in that order) came first.
    @Test(arguments: 0...4)
    func droppedPollerIsReleased(calls: Int) {
        let steps: [(BackgroundPoller) -> Void] = [{ $0.start() }, { $0.pause() }, { $0.unpause() }, { $0.stop() }]
        var poller: BackgroundPoller? = BackgroundPoller()
        for step in steps.prefix(calls) { step(poller!) }
        weak let dropped = poller
        // The snippet keeps its timer private, as the README shows it: reached by reflection.
        weak let timer = Mirror(reflecting: poller!).children.first { $0.label == "timer" }?.value
            as? SafeDispatchTimer
        #expect(timer != nil, "the poller's timer was not found")
        poller = nil
        #expect(dropped == nil, "the poller outlived its last reference")
        #expect(timer == nil, "the poller's timer outlived the poller")
    }

    /// The README's "Deadlines and leeway" block, then its "Other clocks, GCD, engines of your
    /// own" block. Real time, but nothing is waited for: every timer is cancelled long before
    /// it fires.
    @Test(.timeLimit(.minutes(1)))
    func deadlinesLeewayAndClocks() async throws {
        let timer = SafeDispatchTimer(queue: .main)              // handler on a queue of yours
        timer.schedule(deadline: .now() + .milliseconds(10), repeating: .milliseconds(1),
                       leeway: .microseconds(100)) { tick in
            // tick.scheduled, tick.fired, tick.lateness, tick.missed, tick.sequence
        }
        timer.reschedule(deadline: .now() + .seconds(1), repeating: .milliseconds(5))
        timer.cancel()                                           // once it returns, no handler starts

        // The same in Duration terms. To wait for a running handler too, `await` the cancel in
        // async code (it suspends), or call `cancelAndWait()` in synchronous code (it blocks).
        timer.schedule(after: .milliseconds(10), every: .milliseconds(1), leeway: .microseconds(100)) { _ in }
        timer.reschedule(after: .seconds(1), every: .milliseconds(5))   // or reschedule(at:every:)
        await timer.cancelAndAwaitHandlers()

        let wall = SafeDispatchTimer(clock: .wall)               // or .boottime
        wall.schedule(at: TimerClock.wall.now().advanced(by: .seconds(60))) { _ in rotateLogs() }

        let gcd = SafeDispatchTimer(backend: .dispatch)          // the same API on GCD
        let rt = try TimerEngine(configuration: .init(realtimePriority: 50, spinWindow: .microseconds(20)))
        let precise = SafeDispatchTimer(backend: .engine(rt))

        // Many threads arming their own timeouts: a shard each, so they share no lock.
        let server = try TimerEngine(configuration: .init(shards: 8))
        let timeout = SafeDispatchTimer(backend: .engine(server))
        await server.shutdown()                                  // syncShutdown() in synchronous code

        #expect(timer.state == .cancelled)
        #expect(wall.cancel())
        #expect([gcd.state, precise.state, timeout.state] == [.idle, .idle, .idle])
        #expect(!timeout.schedule(after: .seconds(1)) {}, "a timer on the stopped engine schedules nothing")
        #expect(server.configuration.shards == 8)
        await rt.shutdown()
    }

    /// The README's deadline block: both calls return at once, long before their deadlines,
    /// with the body's result.
    @Test(.timeLimit(.minutes(1)))
    func deadlines() async throws {
        let database = Database()
        let profiles = Profiles()
        let id = 7
        let user = try await withDeadline(in: .milliseconds(200)) { try await database.user(id: id) }
        let deadline = ContinuousClock.now + .seconds(2)         // one deadline for several calls
        let profile = try await withDeadline(deadline, tolerance: .milliseconds(5)) { try await profiles.load(id) }
        #expect(user == id && profile == id)
        #expect(!Task.isCancelled)
    }

    // MARK: In a server: a checklist

    /// The checklist's status block, with a `profiles` that answers at once, or only when
    /// cancelled: 200 when the body returns, 504 when the deadline cancels it, 499 when the
    /// request's task is cancelled first (a client that went away).
    @Test(.timeLimit(.minutes(1)))
    func aDeadlineIsNotAClientThatWentAway() async throws {
        struct Profiles {
            var answers: Bool
            func load(_ id: Int) async throws -> Int {
                if !self.answers { try await Task.sleep(for: .seconds(3_600)) }
                return id
            }
        }
        func handled(answering answers: Bool, cancelled: Bool = false) async -> Int {
            let profiles = Profiles(answers: answers)
            func status(of id: Int) async -> Int {                   // an HTTP status code
                do {
                    return try await withDeadline(in: .milliseconds(200)) {
                        do {
                            _ = try await profiles.load(id)
                            return 200
                        } catch is CancellationError where Task.isEngineDeadlineExpired {
                            return 504                               // the deadline passed
                        }
                    }
                } catch is CancellationError {
                    return 499                                       // the client went away
                } catch {
                    return 500
                }
            }
            let request = Task { await status(of: 7) }
            if cancelled { request.cancel() }
            return await request.value
        }
        #expect(await handled(answering: true) == 200)
        #expect(await handled(answering: false) == 504)
        #expect(await handled(answering: false, cancelled: true) == 499)
    }

    // MARK: Ticks, an idle timeout

    /// The loop runs until its task is cancelled, then ends.
    @Test(.timeLimit(.minutes(1)))
    func ticksUntilCancelled() async {
        let sampling = Task {
            for await tick in TimerEngine.shared.ticks(every: .milliseconds(20)) {
                if tick.missed > 0 { log("fell behind by \(tick.missed) periods") }
                sample()
            }
            return Task.isCancelled
        }
        for await _ in self.samples.stream.prefix(3) {}
        sampling.cancel()
        #expect(await sampling.value, "the loop ended before its task was cancelled")
    }

    /// On the shared engine: the session is only touched and read, never left to expire.
    @Test
    func sessionTimeout() {
        let connection = ArticleSnippetTests.Connection()
        let session = ExpiringValue(connection, lifetime: .seconds(30)) { $0.close() }
        session.touch()                                          // on every request: +30 s
        let current = session.value                              // nil once expired
        #expect(current === connection)
        #expect(session.invalidate() === connection)
        #expect(session.value == nil)
    }

    // MARK: Testing without waiting

    @Test
    func manualTimelineFiresSynchronously() async {
        let timeline = ManualTimeline()
        let timer = SafeDispatchTimer(backend: .custom(timeline))
        timer.schedule(interval: 5) { log("poll") }
        timeline.advance(by: .seconds(15))                       // three firings, synchronously
        self.logged.continuation.finish()
        #expect(await self.lines(logged: .max) == ["poll", "poll", "poll"])
        #expect(timer.state == .running)
    }
}
