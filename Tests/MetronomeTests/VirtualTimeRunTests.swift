@preconcurrency import Dispatch
import MetronomeTesting
import Testing

@testable import Metronome

/// `ManualTimeline.run`: time that moves on by itself whenever every task of the run waits.
/// Each test asserts where `now` ended and what ran when, never how long the run took.
@Suite
struct VirtualTimeRunTests {
    let timeline = ManualTimeline(startingAt: ManualHarness.origin)

    func at(_ offset: Duration) -> TimerInstant {
        ManualHarness.origin.advanced(by: offset)
    }

    // MARK: Speed and exactness

    @Test(.timeLimit(.minutes(1)))
    func anHourOfOneSecondSleepsEndsExactlyAnHourOn() async throws {
        let clock = self.timeline.clock
        let slept = try await self.timeline.run {
            var count = 0
            for _ in 0..<3600 {
                try await Task.sleep(for: .seconds(1), clock: clock)
                count += 1
            }
            return count
        }
        #expect(slept == 3600)
        #expect(self.timeline.now == self.at(.seconds(3600)))
        #expect(self.timeline.armedCount == 0)
    }

    @Test(.timeLimit(.minutes(1)))
    func aHundredConcurrentSleepersEachWakeAtTheirDeadline() async throws {
        let clock = self.timeline.clock
        let woke = try await self.timeline.run {
            try await withThrowingTaskGroup(of: (Int, TimerInstant).self) { group in
                for index in 1...100 {
                    group.addTask {
                        try await Task.sleep(for: .milliseconds(10 * index), clock: clock)
                        return (index, clock.now)
                    }
                }
                return try await group.reduce(into: [Int: TimerInstant]()) { $0[$1.0] = $1.1 }
            }
        }
        #expect(woke.count == 100)
        for (index, instant) in woke {
            #expect(instant == self.at(.milliseconds(10 * index)), "sleeper \(index)")
        }
        #expect(self.timeline.now == self.at(.seconds(1)))
    }

    @Test(.timeLimit(.minutes(1)))
    func aDeadlineExpiresInVirtualTime() async throws {
        let clock = EngineClock(backend: .custom(self.timeline))
        let sleeper = self.timeline.clock
        let (expired, caught) = try await self.timeline.run {
            do {
                try await withDeadline(in: .seconds(5), clock: clock) {
                    try await Task.sleep(for: .seconds(60), clock: sleeper)
                }
                return (false, false)
            } catch is CancellationError {
                return (Task.isCancelled, true)
            }
        }
        #expect(caught && expired)
        #expect(self.timeline.now == self.at(.seconds(5)))
        #expect(self.timeline.armedCount == 0)
    }

    /// A task that always has a job ready keeps time still: yielding 1 000 times beside a
    /// sleeper, it sees the same instant throughout, and the sleeper wakes after it ends.
    /// Run repeatedly with both cores busy, where a guess by yields would fire early.
    @Test(.timeLimit(.minutes(1)))
    func timeNeverMovesWhileATaskHasAJobReady() async throws {
        let busy = try BusyCores(count: 2)
        defer { busy.stop() }
        for round in 0..<20 {
            let timeline = ManualTimeline(startingAt: ManualHarness.origin)
            let clock = timeline.clock
            let (seen, wokeAfter) = try await timeline.run {
                async let sleeper: Int = {
                    try await Task.sleep(for: .nanoseconds(1), clock: clock)
                    return 1
                }()
                var seen: Set<TimerInstant> = []
                for _ in 0..<1000 {
                    await Task.yield()
                    seen.insert(clock.now)
                }
                return (seen, try await sleeper)
            }
            #expect(seen == [ManualHarness.origin], "round \(round): time moved while a job was ready")
            #expect(wokeAfter == 1)
            #expect(timeline.now == ManualHarness.origin.advanced(by: .nanoseconds(1)), "round \(round)")
        }
    }

    // MARK: Deadlock

    @Test(.timeLimit(.minutes(1)))
    func waitingWithNothingArmedEndsTheRunWithADeadlockError() async throws {
        let clock = self.timeline.clock
        let (never, continuation) = AsyncStream.makeStream(of: Int.self)
        defer { continuation.finish() }
        let error = await #expect(throws: ManualTimeline.RunError.self) {
            try await self.timeline.run {
                try await Task.sleep(for: .seconds(5), clock: clock)
                for await _ in never {}
                // The deadlock cancels the body's task, which ends the wait.
                #expect(Task.isCancelled)
            }
        }
        #expect(error == .deadlock(at: self.at(.seconds(5))))
        #expect(error?.description.contains("deadlock in virtual time") == true)
        #expect(self.timeline.now == self.at(.seconds(5)))
    }

    /// A wait that ignores cancellation does not keep a deadlocked run from ending; resumed
    /// later, its task goes on outside the run.
    @Test(.timeLimit(.minutes(1)))
    func aDeadlockEndsTheRunEvenWhenTheWaitIgnoresCancellation() async throws {
        let parked = Locked<CheckedContinuation<Void, Never>?>(nil)
        let finished = AsyncStream.makeStream(of: Void.self)
        await #expect(throws: ManualTimeline.RunError.deadlock(at: ManualHarness.origin)) {
            try await self.timeline.run {
                await withCheckedContinuation { continuation in parked.withLock { $0 = continuation } }
                finished.continuation.yield()
            }
        }
        parked.withLock { $0.take() }?.resume()
        for await _ in finished.stream { break }
    }

    @Test(.timeLimit(.minutes(1)))
    func aSecondRunOfTheSameTimelineIsRefused() async throws {
        let timeline = self.timeline
        let inner = try await timeline.run {
            do {
                try await timeline.run {}
                return false
            } catch ManualTimeline.RunError.alreadyRunning {
                return true
            }
        }
        #expect(inner)
        // Runs one after another are fine.
        try await timeline.run { try await Task.sleep(for: .seconds(1), clock: timeline.clock) }
        try await timeline.run { try await Task.sleep(for: .seconds(1), clock: timeline.clock) }
        #expect(timeline.now == self.at(.seconds(2)))
    }

    // MARK: Results, errors, cancellation

    struct Refused: Error, Equatable {}

    @Test(.timeLimit(.minutes(1)))
    func theBodysErrorIsRethrown() async {
        let clock = self.timeline.clock
        await #expect(throws: Refused()) {
            try await self.timeline.run {
                try await Task.sleep(for: .seconds(3), clock: clock)
                throw Refused()
            }
        }
        #expect(self.timeline.now == self.at(.seconds(3)))
    }

    @Test(.timeLimit(.minutes(1)))
    func cancellingTheCallerCancelsTheBody() async {
        let timeline = self.timeline
        let entered = AsyncStream.makeStream(of: Void.self)
        let running = Task {
            try await timeline.run {
                let held = timeline.hold()  // time stands still: only the cancellation can end the sleep
                entered.continuation.yield()
                try await Task.sleep(for: .seconds(10), clock: timeline.clock)
                held.release()
            }
        }
        for await _ in entered.stream { break }
        running.cancel()
        await #expect(throws: CancellationError.self) { try await running.value }
        #expect(timeline.now == ManualHarness.origin)
    }

    // MARK: Tasks of the run

    actor Counter {
        var count = 0
        func increment() -> Int {
            self.count += 1
            return self.count
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func childTasksPreferredTasksAndActorsAreCounted() async throws {
        let timeline = self.timeline
        let clock = timeline.clock
        let counter = Counter()
        let total = try await timeline.run {
            let worker = Task(executorPreference: timeline.taskExecutor) {
                try await Task.sleep(for: .seconds(7), clock: clock)
                return await counter.increment()
            }
            async let child: Int = {
                try await Task.sleep(for: .seconds(3), clock: clock)
                return await counter.increment()
            }()
            let first = try await child
            #expect(clock.now == self.at(.seconds(3)))
            let second = try await worker.value
            return first + second
        }
        #expect(total == 3)
        #expect(timeline.now == self.at(.seconds(7)))
    }

    actor Ledger {
        var entries: [TimerInstant] = []
        /// Records the time, sleeps a second inside the actor (letting others in), and
        /// records it again.
        func visit(_ clock: ManualClock) async throws {
            self.entries.append(clock.now)
            try await Task.sleep(for: .seconds(1), clock: clock)
            self.entries.append(clock.now)
        }
    }

    /// Fifty tasks contend for one actor: jobs queued on a default actor by tasks of the
    /// run run on the run's executor, so time waits for every one of them.
    @Test(.timeLimit(.minutes(1)))
    func tasksContendingForAnActorAreCounted() async throws {
        let timeline = self.timeline
        let clock = timeline.clock
        let ledger = Ledger()
        try await timeline.run {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<50 { group.addTask { try await ledger.visit(clock) } }
                try await group.waitForAll()
            }
        }
        let entries = await ledger.entries
        #expect(entries.count == 100)
        #expect(entries.filter { $0 == ManualHarness.origin }.count == 50)
        #expect(entries.filter { $0 == self.at(.seconds(1)) }.count == 50)
        #expect(timeline.now == self.at(.seconds(1)))
    }

    // MARK: Every API on the timeline

    @Test(.timeLimit(.minutes(1)))
    func aTimersHandlerResumesTheRun() async throws {
        let timeline = self.timeline
        let ticks = try await timeline.run {
            let timer = SafeDispatchTimer(backend: .custom(timeline))
            let (stream, continuation) = AsyncStream.makeStream(of: Tick.self)
            timer.schedule(after: .seconds(2), every: .seconds(2)) { continuation.yield($0) }
            var ticks: [Tick] = []
            for await tick in stream {
                ticks.append(tick)
                if ticks.count == 3 { break }
            }
            timer.cancel()
            return ticks
        }
        #expect(ticks.map(\.fired) == [2, 4, 6].map { self.at(.seconds($0)) })
        #expect(timeline.now == self.at(.seconds(6)))
    }

    @Test(.timeLimit(.minutes(1)))
    func engineClockSleepsAndTicksAdvanceWithTheRun() async throws {
        let timeline = self.timeline
        let backend = SafeDispatchTimer.Backend.custom(timeline)
        let sequences = try await timeline.run {
            try await Task.sleep(for: .milliseconds(500), clock: EngineClock(backend: backend))
            var sequences: [UInt64] = []
            for await tick in backend.ticks(every: .seconds(1)) {
                sequences.append(tick.sequence)
                if sequences.count == 4 { break }
            }
            return sequences
        }
        #expect(sequences == [0, 1, 2, 3])
        #expect(timeline.now == self.at(.milliseconds(4500)))
        #expect(timeline.armedCount == 0)
    }

    @Test(.timeLimit(.minutes(1)))
    func anExpiringValueExpiresInTheRun() async throws {
        let timeline = self.timeline
        let clock = timeline.clock
        let expiredAt = try await timeline.run { () async throws -> TimerInstant? in
            let (expired, continuation) = AsyncStream.makeStream(of: TimerInstant.self)
            let session = ExpiringValue("session", lifetime: .seconds(30), backend: .custom(timeline)) { _ in
                continuation.yield(timeline.now)
            }
            for _ in 0..<3 {
                try await Task.sleep(for: .seconds(20), clock: clock)
                #expect(session.touch())
            }
            for await instant in expired { return instant }
            return nil
        }
        #expect(expiredAt == self.at(.seconds(90)))
    }

    /// The scheduler's events come through a queue the run cannot see: they hold time
    /// until delivered, so the ping at 1 s reaches the consumer before time moves to 2 s.
    @Test(.timeLimit(.minutes(1)))
    func schedulerEventsHoldTimeUntilDelivered() async throws {
        let timeline = self.timeline
        let seen = try await timeline.run {
            let scheduler = TimerScheduler(backend: .custom(timeline))
            let events = scheduler.events
            let ping = scheduler.schedule(after: .seconds(1), every: .seconds(1))
            let stop = scheduler.schedule(after: .seconds(5))
            var seen: [(TimerScheduler.Event, TimerInstant)] = []
            for await event in events {
                seen.append((event, timeline.now))
                if event == .executed(stop, willRepeat: false) { break }
            }
            scheduler.cancel(ping)
            return seen.map { "\($0.0 == .executed(ping, willRepeat: true) ? "ping" : "stop")@\($0.1)" }
        }
        #expect(seen == [1, 2, 3, 4, 5].map { "ping@\(self.at(.seconds($0)))" } + ["stop@\(self.at(.seconds(5)))"])
        // Every delivery releases its hold, the last cancellation's perhaps after the run:
        // a run waiting on nothing then ends as a deadlock, not a wait.
        await #expect(throws: ManualTimeline.RunError.deadlock(at: self.at(.seconds(5)))) {
            try await timeline.run {
                let (never, continuation) = AsyncStream.makeStream(of: Int.self)
                defer { continuation.finish() }
                for await _ in never {}
            }
        }
    }

    // MARK: Holding time for work outside the run

    @Test(.timeLimit(.minutes(1)))
    func aHoldKeepsADeadlineFromFiringWhileWorkOnAQueueIsPending() async throws {
        let timeline = self.timeline
        let clock = EngineClock(backend: .custom(timeline))
        let answer = try await timeline.run {
            await withDeadline(in: .seconds(1), clock: clock) {
                await timeline.hold {
                    await withCheckedContinuation { continuation in
                        DispatchQueue.global().async { continuation.resume(returning: 42) }
                    }
                }
            }
        }
        #expect(answer == 42)
        #expect(timeline.now == ManualHarness.origin)
    }

    @Test(.timeLimit(.minutes(1)))
    func aHeldRunWithNothingArmedWaitsRatherThanReportingADeadlock() async throws {
        let timeline = self.timeline
        let answer = try await timeline.run {
            let held = timeline.hold()
            return await withCheckedContinuation { continuation in
                DispatchQueue.global().async {
                    continuation.resume(returning: 7)
                    held.release()
                }
            }
        }
        #expect(answer == 7)
    }

    @Test
    func releasingAHoldTwiceOrDroppingItReleasesOnce() async throws {
        let timeline = self.timeline
        let first = timeline.hold()
        first.release()
        first.release()
        do { _ = timeline.hold() }
        // Nothing held any more: a run with nothing armed reports its deadlock.
        await #expect(throws: ManualTimeline.RunError.deadlock(at: ManualHarness.origin)) {
            try await timeline.run {
                let (never, continuation) = AsyncStream.makeStream(of: Int.self)
                defer { continuation.finish() }
                for await _ in never {}
            }
        }
    }
}

/// Threads that keep the machine's cores busy until stopped, so that a run's thread is
/// preempted at arbitrary points. Kernel threads of their own: spinning on the Dispatch pool
/// would starve every other test's queues.
final class BusyCores: Sendable {
    private let running = Locked(true)
    private let threads: [PosixThread]

    init(count: Int) throws {
        var threads: [PosixThread] = []
        for _ in 0..<count {
            threads.append(
                try PosixThread.spawn { [running] in
                    while running.current {}
                })
        }
        self.threads = threads
    }

    func stop() {
        self.running.withLock { $0 = false }
        for thread in self.threads { thread.join() }
    }
}
