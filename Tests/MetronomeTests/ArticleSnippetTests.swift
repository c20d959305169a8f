@preconcurrency import Dispatch
import Testing

import Metronome
import MetronomeTesting

/// The code of every article in `Metronome.docc`, kept compiling and running here. Each
/// snippet is copied as the article shows it; what surrounds it makes it checkable.
@Suite
struct ArticleSnippetTests {
    // MARK: GettingStarted.md

    @Test(.timeLimit(.minutes(1)))
    func gettingStarted() async throws {
        let timeline = ManualTimeline()
        let fired = Locked(0)
        // In the article, `SafeDispatchTimer()`: the shared engine.
        let timer = SafeDispatchTimer(backend: .custom(timeline))
        timer.schedule(after: .milliseconds(10), every: .milliseconds(1), leeway: .microseconds(100)) { tick in
            if tick.missed > 0 { print("fell behind by \(tick.missed) periods") }
            fired.withLock { $0 += 1 }
        }
        timeline.advance(by: .milliseconds(12))
        #expect(fired.current == 3)

        timer.suspend()                                          // false unless running
        timer.resume()                                           // false unless suspended
        timer.reschedule(after: .seconds(1), every: .milliseconds(5))
        timer.cancel()                                           // false unless running or suspended
        #expect(timer.state == .cancelled)

        await timer.cancelAndAwaitHandlers()                     // suspends; blocks no thread

        let onMain = SafeDispatchTimer(queue: .main)
        let onGCD = SafeDispatchTimer(backend: .dispatch)
        let wall = SafeDispatchTimer(clock: .wall)
        #expect([onMain.state, onGCD.state, wall.state] == [.idle, .idle, .idle])
    }

    // MARK: SleepingOnTheEngine.md

    func retry<C: Clock<Duration>>(
        attempts: Int, backoff: Duration, clock: C, _ operation: () async throws -> Bool
    ) async throws -> Bool {
        var delay = backoff
        for _ in 0..<attempts {
            if try await operation() { return true }
            try await Task.sleep(for: delay, clock: clock)
            delay *= 2
        }
        return false
    }

    @Test(.timeLimit(.minutes(1)))
    func sleepingOnTheEngine() async throws {
        let clock = EngineClock()                                // the shared engine, monotonic
        let start = clock.now
        try await Task.sleep(for: .milliseconds(5), tolerance: .microseconds(50), clock: clock)
        #expect(clock.now >= start.advanced(by: .milliseconds(5)))

        // The retry loop on virtual time: three failures sleep 1 + 2 + 4 seconds.
        let timeline = ManualTimeline()
        let virtual = timeline.clock
        let calls = Locked(0)
        let retrying = Task {
            try await self.retry(attempts: 4, backoff: .seconds(1), clock: virtual) {
                calls.withLock { $0 += 1; return $0 == 4 }
            }
        }
        for seconds in [1, 2, 4] {
            await timeline.waitForArmedTimers(1)
            timeline.advance(by: .seconds(seconds))
        }
        #expect(try await retrying.value)
        #expect(calls.current == 4)
        #expect(timeline.now == TimerInstant(nanoseconds: 0).advanced(by: .seconds(7)))
    }

    // MARK: TicksAsASequence.md

    func sample(every period: Duration, count: Int) async -> [Tick] {
        var ticks: [Tick] = []
        for await tick in TimerEngine.shared.ticks(every: period) {
            ticks.append(tick)
            if ticks.count == count { break }                // disarms the timer
        }
        return ticks
    }

    @Test(.timeLimit(.minutes(1)))
    func ticksAsASequence() async {
        let ticks = await self.sample(every: .milliseconds(1), count: 3)
        #expect(ticks.count == 3)
        for (previous, tick) in zip(ticks, ticks.dropFirst()) {
            #expect(tick.sequence == previous.sequence + UInt64(tick.missed) + 1)
        }
    }

    // MARK: ExpiringValues.md

    final class Connection: Sendable {
        let closed = Locked(false)

        func close() { self.closed.withLock { $0 = true } }
    }

    func track(_ connection: Connection) -> ExpiringValue<Connection> {
        ExpiringValue(connection, lifetime: .seconds(30)) { $0.close() }
    }

    func handleRequest(on session: ExpiringValue<Connection>) -> Bool {
        guard session.touch(), let connection = session.value else { return false }
        _ = connection                                       // serve the request
        return true
    }

    @Test(.timeLimit(.minutes(1)))
    func expiringValues() {
        let tracked = self.track(Connection())
        #expect(self.handleRequest(on: tracked))
        #expect(tracked.invalidate() != nil)
        #expect(!self.handleRequest(on: tracked))

        // The same on virtual time: untouched for its lifetime, the connection is closed.
        let timeline = ManualTimeline()
        let connection = Connection()
        let session = ExpiringValue(connection, lifetime: .seconds(30), backend: .custom(timeline)) { $0.close() }
        timeline.advance(by: .seconds(20))
        #expect(self.handleRequest(on: session))
        timeline.advance(by: .seconds(30))
        #expect(connection.closed.current)
        #expect(!self.handleRequest(on: session))
    }

    // MARK: SchedulingByID.md

    func pingUntilTimeout(_ scheduler: TimerScheduler) async {
        let ping = scheduler.schedule(after: .seconds(1), repeating: .seconds(1))
        let timeout = scheduler.schedule(after: .seconds(30))
        for await event in scheduler.events {
            switch event {
            case .executed(ping, _): print("ping")
            case .executed(timeout, _), .cancelled(timeout):
                scheduler.cancel(ping)
                return
            default: break
            }
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func schedulingByID() async {
        let timeline = ManualTimeline()
        let scheduler = TimerScheduler(backend: .custom(timeline))
        let pinging = Task { await self.pingUntilTimeout(scheduler) }
        await timeline.waitForArmedTimers(2)
        timeline.advance(by: .seconds(30))
        await pinging.value
        #expect(scheduler.activeTimers.isEmpty)
        #expect(timeline.armedCount == 0)
    }

    // MARK: TestingWithVirtualTime.md

    @Test(.timeLimit(.minutes(1)))
    func testingWithVirtualTime() async throws {
        let timeline = ManualTimeline()
        let timer = SafeDispatchTimer(backend: .custom(timeline))
        timer.schedule(after: .seconds(5), every: .seconds(5)) { tick in print("poll", tick.sequence) }
        timeline.advance(by: .seconds(15))                       // three polls, here and now
        #expect(timer.state == .running)

        let clock = timeline.clock
        let sleeper = Task { try await Task.sleep(for: .seconds(30), clock: clock) }
        await timeline.waitForArmedTimers(2)                     // the article's timeline has only the sleep
        timeline.advance(by: .seconds(30))
        try await sleeper.value                                  // returned without waiting 30 s
        timer.cancel()
    }
}
