@preconcurrency import Dispatch
import Glibc
import Metronome
import MetronomeTesting
import Synchronization
import Testing

/// `withDeadline` in the standard's shape, on an engine of each test's own (through an
/// `EngineClock`), whose `armed` counter back at zero shows that no deadline's timer
/// outlives its call; and on virtual time.
@Suite(.serialized)
struct DeadlineTests {
    let engine: TimerEngine
    let clock: EngineClock

    init() throws {
        self.engine = try makeEngine()
        self.clock = EngineClock(backend: .engine(self.engine), clock: .boottime)
    }

    private struct OwnError: Error, Equatable {}

    /// The call throws exactly what the body throws: a `catch` binds the body's own error
    /// type, with no cast.
    @Test(.timeLimit(.minutes(1)))
    func resultAndTypedErrorPassThroughAndDisarm() async throws {
        let value = await withDeadline(in: .seconds(60), clock: self.clock) { 42 }
        #expect(value == 42)
        #expect(self.engine.counters.armed == 0)
        do {
            try await withDeadline(self.clock.now + .seconds(60), clock: self.clock) { () throws(OwnError) in
                throw OwnError()
            }
            Issue.record("the body's error did not come out")
        } catch {
            let typed: OwnError = error
            #expect(typed == OwnError())
        }
        #expect(self.engine.counters.armed == 0)
        #expect(!Task.isCancelled, "a deadline that did not pass cancels nothing")
    }

    /// The body sees the cancellation at or after the deadline on the deadline's own clock,
    /// never before, and its `CancellationError` comes out as it is. A call whose deadline
    /// passed before it began (a stalled machine) runs its body cancelled.
    @Test(.timeLimit(.minutes(1)))
    func cancellationComesAtOrAfterTheDeadline() async throws {
        for round in 0..<20 {
            let continuous = Recorder<ContinuousClock.Instant>()
            let continuousDeadline = ContinuousClock.now + .milliseconds(2 + round % 5)
            await #expect(throws: CancellationError.self) {
                try await Task {
                    try await withDeadline(continuousDeadline) {
                        try await Self.sleepUntilCancelled { continuous.append(.now) }
                    }
                }.value
            }
            let suspending = Recorder<SuspendingClock.Instant>()
            let suspendingDeadline = SuspendingClock.now + .milliseconds(2 + round % 5)
            await #expect(throws: CancellationError.self) {
                try await Task {
                    try await withDeadline(suspendingDeadline, tolerance: .microseconds(100), clock: SuspendingClock())
                    {
                        try await Self.sleepUntilCancelled { suspending.append(.now) }
                    }
                }.value
            }
            #expect(continuous.entries.allSatisfy { $0 >= continuousDeadline })
            #expect(suspending.entries.allSatisfy { $0 >= suspendingDeadline })
            #expect(continuous.count == 1 && suspending.count == 1)
        }
    }

    /// On virtual time the deadline passes when the timeline reaches it: not a nanosecond
    /// before.
    @Test(.timeLimit(.minutes(1)))
    func aDeadlineOnVirtualTimePassesExactlyAtItsInstant() async throws {
        let timeline = ManualTimeline()
        let clock = EngineClock(backend: .custom(timeline))
        let deadline = clock.now + .seconds(5)
        let seen = Recorder<TimerInstant>()
        let call = Task {
            try await withDeadline(deadline, clock: clock) {
                try await Self.sleepUntilCancelled { seen.append(timeline.now) }
            }
        }
        await timeline.waitForArmedTimers(1)
        // The firing, and the cancellation it makes, run inside `advance`.
        timeline.advance(by: .seconds(5) - .nanoseconds(1))
        #expect(seen.count == 0)
        timeline.advance(by: .nanoseconds(1))
        #expect(seen.entries == [deadline])
        await #expect(throws: CancellationError.self) { try await call.value }
    }

    @Test(.timeLimit(.minutes(1)))
    func aDeadlineLeavesTheTaskCancelled() async throws {
        let clock = self.clock
        let stillCancelled = await Task {
            _ = try? await withDeadline(in: .milliseconds(1), clock: clock) { try await Self.sleepUntilCancelled {} }
            return Task.isCancelled
        }.value
        #expect(stillCancelled)
    }

    /// A body that ignores the cancellation and returns after the deadline keeps its result.
    @Test(.timeLimit(.minutes(1)))
    func aResultAfterTheDeadlineIsKept() async throws {
        let clock = self.clock
        let (value, cancelled) = await Task {
            let value = await withDeadline(in: .milliseconds(1), clock: clock) {
                while !Task.isCancelled { await Task.yield() }
                return "done"
            }
            return (value, Task.isCancelled)
        }.value
        #expect(value == "done")
        #expect(cancelled)
    }

    /// The outer deadline, the earlier, cancels the inner body; both calls throw the body's
    /// `CancellationError`, and the body can tell the deadline's cancellation.
    @Test(.timeLimit(.minutes(1)))
    func theEarlierOuterDeadlineEndsTheInnerBody() async throws {
        let clock = self.clock
        let inner = Recorder<String>()
        let outcome = await Task {
            try await withDeadline(in: .milliseconds(5), clock: clock) {
                try await withDeadline(in: .seconds(60), clock: clock) {
                    do {
                        try await Self.sleepUntilCancelled {}
                    } catch {
                        inner.append("\(type(of: error)) expired: \(Task.isEngineDeadlineExpired)")
                        throw error
                    }
                }
            }
        }.result
        #expect(throws: CancellationError.self) { try outcome.get() }
        #expect(inner.entries == ["CancellationError expired: true"])
        #expect(self.engine.counters.armed == 0)
    }

    @Test(.timeLimit(.minutes(1)))
    func anInnerDeadlineEndsOnlyTheInnerBody() async throws {
        let clock = self.clock
        let outcome = await Task {
            await withDeadline(in: .seconds(60), clock: clock) {
                let inner = await Task {
                    try await withDeadline(in: .milliseconds(2), clock: clock) { try await Self.sleepUntilCancelled {} }
                }.result
                #expect(throws: CancellationError.self) { try inner.get() }
                return Task.isCancelled || Task.isEngineDeadlineExpired
            }
        }.value
        #expect(outcome == false)
        #expect(self.engine.counters.armed == 0)
    }

    /// A task cancelled before the call still runs the body, which sees the cancellation
    /// itself: not one of a deadline.
    @Test(.timeLimit(.minutes(1)))
    func anAlreadyCancelledTaskRunsTheBody() async throws {
        let clock = self.clock
        let outcome = await Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await withDeadline(in: .seconds(60), clock: clock) { Task.isEngineDeadlineExpired }
        }.value
        #expect(outcome == false)
        #expect(self.engine.counters.armed == 0)
    }

    /// A deadline already passed arms nothing: the body runs cancelled, by the deadline.
    @Test(.timeLimit(.minutes(1)))
    func aPassedDeadlineRunsTheBodyCancelled() async throws {
        let clock = self.clock
        let (cancelled, expired) = await Task {
            await withDeadline(SuspendingClock.now - .seconds(1), clock: SuspendingClock()) {
                (Task.isCancelled, Task.isEngineDeadlineExpired)
            }
        }.value
        #expect(cancelled && expired)
        let seen = await Task {
            await withDeadline(in: .zero, clock: clock) { Task.isCancelled }
        }.value
        #expect(seen)
        #expect(self.engine.counters.armed == 0)
    }

    /// A stopped engine cannot time the deadline: the body runs cancelled rather than
    /// unbounded, and the call throws nothing of its own.
    @Test(.timeLimit(.minutes(1)))
    func aStoppedEngineRunsTheBodyCancelled() async throws {
        await self.engine.shutdown()
        let clock = self.clock
        let (cancelled, expired) = await Task {
            await withDeadline(in: .seconds(60), clock: clock) { (Task.isCancelled, Task.isEngineDeadlineExpired) }
        }.value
        #expect(cancelled && expired)
    }

    /// An engine that stops under a running body can no longer keep its deadline: the body
    /// is cancelled at once rather than left unbounded.
    @Test(.timeLimit(.minutes(1)))
    func aShutdownCancelsTheBody() async throws {
        let clock = self.clock
        let call = Task {
            try await withDeadline(in: .seconds(3600), clock: clock) { try await Self.sleepUntilCancelled {} }
        }
        #expect(await eventually { self.engine.counters.armed == 1 })
        await self.engine.shutdown()
        await #expect(throws: CancellationError.self) { try await call.value }
    }

    /// Callees read the earliest deadline in force on each clock; none outside a deadline.
    @Test(.timeLimit(.minutes(1)))
    func calleesReadTheEarliestDeadlineOnEachClock() async throws {
        #expect(!Task.hasActiveEngineDeadline)
        #expect(Task.activeEngineDeadline(for: ContinuousClock()) == nil)
        let outer = ContinuousClock.now + .seconds(60)
        let suspending = SuspendingClock.now + .seconds(120)
        await withDeadline(outer) {
            await withDeadline(suspending, clock: SuspendingClock()) {
                await withDeadline(outer + .seconds(60)) {
                    #expect(Task.hasActiveEngineDeadline)
                    #expect(Task.activeEngineDeadline(for: ContinuousClock()) == outer)
                    #expect(Task.activeEngineDeadline(for: SuspendingClock()) == suspending)
                    // The engine's boottime clock is ContinuousClock's.
                    #expect(Task.activeEngineDeadline(for: self.clock) == TimerInstant(outer))
                    #expect(Task.activeEngineDeadline(for: EngineClock(clock: .wall)) == nil)
                    #expect(!Task.isEngineDeadlineExpired)
                }
            }
        }
        #expect(!Task.hasActiveEngineDeadline)
    }

    /// The body runs where the caller does: on an actor, it touches the actor's state
    /// synchronously, and no job of the call goes through the actor's executor (a hop off
    /// the actor and back would be one).
    @Test(.timeLimit(.minutes(1)))
    func theBodyRunsOnTheCallersActorWithoutAHop() async throws {
        let ledger = Ledger()
        let hops = await ledger.recordUnderADeadline(clock: self.clock)
        #expect(hops == 0)
        #expect(await ledger.entries == 1)
    }

    /// Suspends until the task is cancelled, calling `cancelled` where the cancellation is
    /// seen, then throws `CancellationError`.
    private static func sleepUntilCancelled(_ cancelled: @escaping @Sendable () -> Void) async throws {
        try await withTaskCancellationHandler {
            try await Task.sleep(for: .seconds(3600))
        } onCancel: {
            cancelled()
        }
    }
}

/// An actor on an executor that counts the jobs enqueued on it.
private actor Ledger {
    final class CountingExecutor: SerialExecutor {
        let queue = DispatchQueue(label: "metronome.tests.ledger")
        let enqueued = Atomic<Int>(0)

        func enqueue(_ job: consuming ExecutorJob) {
            self.enqueued.add(1, ordering: .relaxed)
            let job = UnownedJob(job)
            self.queue.async { job.runSynchronously(on: self.asUnownedSerialExecutor()) }
        }
    }

    let executor = CountingExecutor()
    var entries = 0

    nonisolated var unownedExecutor: UnownedSerialExecutor {
        self.executor.asUnownedSerialExecutor()
    }

    /// How many jobs were enqueued on the actor while a deadline's body recorded an entry.
    func recordUnderADeadline(clock: EngineClock) async -> Int {
        let before = self.executor.enqueued.load(ordering: .relaxed)
        await withDeadline(in: .seconds(60), clock: clock) { self.entries += 1 }
        return self.executor.enqueued.load(ordering: .relaxed) - before
    }
}
