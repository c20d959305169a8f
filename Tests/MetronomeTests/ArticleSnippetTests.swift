// swift-format-ignore-file
// Its blocks are the DocC articles' code, line for line (DocumentationSnippetTests), laid
// out as the reader sees them.
@preconcurrency import Dispatch
import Synchronization
import Testing

import Metronome
import MetronomeTesting

/// The code of every article in `Metronome.docc`, kept compiling and running here. Each
/// snippet is copied as the article shows it (DocumentationSnippetTests keeps the two equal);
/// what surrounds it makes it checkable.
@Suite
struct ArticleSnippetTests {
    // MARK: GettingStarted.md

    /// On the shared engine, in real time, but each state is read without waiting for a firing.
    @Test(.timeLimit(.minutes(1)))
    func gettingStarted() async {
        let timer = SafeDispatchTimer()                          // on the shared engine
        timer.schedule(after: .milliseconds(10), every: .milliseconds(1), leeway: .microseconds(100)) { tick in
            if tick.missed > 0 { print("fell behind by \(tick.missed) periods") }
        }
        #expect(timer.state == .running)

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
        let start = TimerClock.monotonic.now()
        let clock = EngineClock()                                // the shared engine, monotonic
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
        func close() {}
    }

    func track(_ connection: Connection) -> ExpiringValue<Connection> {
        ExpiringValue(connection, lifetime: .seconds(30)) { $0.close() }
    }

    func handleRequest(on session: ExpiringValue<Connection>) -> Bool {
        guard session.touch(), let connection = session.value else { return false }
        _ = connection                                       // serve the request
        return true
    }

    /// `track` arms its timer on the shared engine, whose expiry would take 30 real seconds;
    /// the expiry is shown on virtual time with the same value, lifetime and handler.
    @Test(.timeLimit(.minutes(1)))
    func expiringValues() {
        let tracked = self.track(Connection())
        #expect(self.handleRequest(on: tracked))
        #expect(tracked.invalidate() != nil)
        #expect(!self.handleRequest(on: tracked))

        let timeline = ManualTimeline()
        let expired = Locked(false)
        let session = ExpiringValue(Connection(), lifetime: .seconds(30), backend: .custom(timeline)) {
            $0.close()
            expired.withLock { $0 = true }
        }
        timeline.advance(by: .seconds(20))
        #expect(self.handleRequest(on: session))
        timeline.advance(by: .seconds(30))
        #expect(expired.current)
        #expect(!self.handleRequest(on: session))
    }

    // MARK: ChoosingAnAPI.md

    struct Heartbeat {
        final class Sent: Sendable { let count = Atomic<Int>(0) }
        let sent = Sent()

        func sendHeartbeat() { self.sent.count.add(1, ordering: .relaxed) }

        func startHeartbeat(on timer: SafeDispatchTimer) throws {
            let started = try timer.start(after: .seconds(1), every: .seconds(1), leeway: .milliseconds(50)) {
                sendHeartbeat()
            }
            if !started { return }   // already running or suspended: nothing to do
        }
    }

    @Test
    func choosingAnAPI() throws {
        let timeline = ManualTimeline()
        let timer = SafeDispatchTimer(backend: .custom(timeline))
        let heartbeat = Heartbeat()
        try heartbeat.startHeartbeat(on: timer)
        try heartbeat.startHeartbeat(on: timer)
        timeline.advance(by: .seconds(3))
        #expect(heartbeat.sent.count.load(ordering: .relaxed) == 3)
        let stopped = try TimerEngine()
        stopped.syncShutdown()
        #expect(throws: TimerError.engineShutDown) {
            try heartbeat.startHeartbeat(on: SafeDispatchTimer(backend: .engine(stopped)))
        }
    }

    // MARK: SchedulingByID.md

    func pingUntilTimeout(_ scheduler: TimerScheduler) async {
        let events = scheduler.events
        let ping = scheduler.schedule(after: .seconds(1), every: .seconds(1))
        let timeout = scheduler.schedule(after: .seconds(30))
        for await event in events {
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
    func testingWithVirtualTime() {
        let timeline = ManualTimeline()
        let timer = SafeDispatchTimer(backend: .custom(timeline))
        timer.schedule(after: .seconds(5), every: .seconds(5)) { tick in print("poll", tick.sequence) }
        timeline.advance(by: .seconds(15))                       // three polls, here and now
        // Polled at 5, 10 and 15 s: the next poll is the timeline's only deadline, at 20 s.
        #expect(timer.state == .running)
        #expect(timeline.runUntilIdle(limit: 1) == 1)
        #expect(timeline.now == TimerInstant(nanoseconds: 0).advanced(by: .seconds(20)))
    }

    @Test(.timeLimit(.minutes(1)))
    func codeThatSleeps() async throws {
        let timeline = ManualTimeline()
        let clock = timeline.clock
        let sleeper = Task { try await Task.sleep(for: .seconds(30), clock: clock) }
        await timeline.waitForArmedTimers(1)
        timeline.advance(by: .seconds(30))
        try await sleeper.value                                  // returned without waiting 30 s
        #expect(timeline.armedCount == 0)
    }

    /// The next message, or `nil` after `idle` without one.
    func nextMessage(from messages: AsyncStream<String>, idle: Duration, clock: EngineClock) async -> String? {
        await withDeadline(in: idle, clock: clock) {
            var iterator = messages.makeAsyncIterator()
            return await iterator.next()                         // nil once the deadline cancels it
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func idleTimeoutInARun() async throws {
        let timeline = ManualTimeline()
        let clock = EngineClock(backend: .custom(timeline))
        let (messages, client) = AsyncStream.makeStream(of: String.self)
        let received = try await timeline.run {
            client.yield("hello")
            let first = await nextMessage(from: messages, idle: .seconds(30), clock: clock)
            let second = await nextMessage(from: messages, idle: .seconds(30), clock: clock)
            return [first, second]
        }
        #expect(received == ["hello", nil])
        #expect(timeline.now == TimerInstant(nanoseconds: 0).advanced(by: .seconds(30)))
    }

    /// Calls `operation` up to `attempts` times, sleeping 1, 2, 4 … seconds between calls.
    func withBackoff<C: Clock<Duration>>(
        attempts: Int, clock: C, _ operation: () async throws -> Bool
    ) async throws -> Bool {
        var delay = Duration.seconds(1)
        for _ in 1..<attempts {
            if try await operation() { return true }
            try await Task.sleep(for: delay, clock: clock)
            delay *= 2
        }
        return try await operation()
    }

    @Test(.timeLimit(.minutes(1)))
    func retryWithBackoffInARun() async throws {
        let timeline = ManualTimeline()
        let calledAt = try await timeline.run {
            var calls: [TimerInstant] = []
            let succeeded = try await withBackoff(attempts: 5, clock: timeline.clock) {
                calls.append(timeline.now)
                return calls.count == 4                              // the fourth call succeeds
            }
            #expect(succeeded)
            return calls
        }
        #expect(calledAt == [0, 1, 3, 7].map { TimerInstant(nanoseconds: 0).advanced(by: .seconds($0)) })
    }

    actor Buffer {
        var flushes = 0
        func flush() { self.flushes += 1 }
    }

    /// Flushes `buffer` every 10 seconds until the task is cancelled.
    func flushPeriodically(_ buffer: Buffer, backend: SafeDispatchTimer.Backend) async {
        for await _ in backend.ticks(every: .seconds(10)) {
            await buffer.flush()
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func periodicJobInARun() async throws {
        let timeline = ManualTimeline()
        let buffer = Buffer()
        try await timeline.run {
            let job = Task(executorPreference: timeline.taskExecutor) {
                await flushPeriodically(buffer, backend: .custom(timeline))
            }
            try await Task.sleep(for: .seconds(65), clock: timeline.clock)
            job.cancel()
            await job.value
        }
        #expect(await buffer.flushes == 6)                      // at 10, 20 … 60 s
    }

    /// The oracle example, on a timer in each state.
    @Test(arguments: TimerContract.states)
    func contractAsOracle(state: SafeDispatchTimer.State) {
        let timeline = ManualTimeline()
        let timer = SafeDispatchTimer(backend: .custom(timeline))
        if state != .idle { timer.schedule(after: .seconds(1), every: .seconds(1)) { _ in } }
        if state == .suspended { timer.suspend() }
        if state == .cancelled { timer.cancel() }
        let before = timer.state
        let accepted = timer.suspend()
        let expected = TimerContract.outcome(of: .suspend, in: before)
        #expect(accepted == expected.accepted && timer.state == expected.state)
        #expect(before == state)
    }
}
