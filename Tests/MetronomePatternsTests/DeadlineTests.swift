import Glibc
import Metronome
import Testing

/// `withTimeout` and `withDeadline` on an engine of each test's own, whose `armed` counter
/// back at zero shows that no deadline's timer outlives its call.
@Suite(.serialized)
struct DeadlineTests {
    let engine: TimerEngine

    init() throws {
        self.engine = try makeEngine()
    }

    private struct OwnError: Error, Equatable {}

    @Test(.timeLimit(.minutes(1)))
    func resultAndOwnErrorPassThroughAndDisarm() async throws {
        let value = try await withTimeout(.seconds(60), engine: self.engine) { 42 }
        #expect(value == 42)
        #expect(self.engine.counters.armed == 0)
        await #expect(throws: OwnError()) {
            try await withDeadline(ContinuousClock.now + .seconds(60), engine: self.engine) { throw OwnError() }
        }
        #expect(self.engine.counters.armed == 0)
        #expect(!Task.isCancelled, "a deadline that did not pass cancels nothing")
    }

    /// The operation sees the cancellation at or after the deadline on the deadline's own
    /// clock, never before; its `CancellationError` becomes a `TimeoutError`. A call whose
    /// deadline passed before it began (a stalled machine) throws without running.
    @Test(.timeLimit(.minutes(1)))
    func cancellationComesAtOrAfterTheDeadline() async throws {
        let engine = self.engine
        var ran = 0
        for round in 0..<20 {
            let continuous = Recorder<ContinuousClock.Instant>()
            let continuousDeadline = ContinuousClock.now + .milliseconds(2 + round % 5)
            await #expect(throws: TimeoutError()) {
                try await Task {
                    try await withDeadline(continuousDeadline, engine: engine) {
                        try await Self.sleepUntilCancelled { continuous.append(.now) }
                    }
                }.value
            }
            let suspending = Recorder<SuspendingClock.Instant>()
            let suspendingDeadline = SuspendingClock.now + .milliseconds(2 + round % 5)
            await #expect(throws: TimeoutError()) {
                try await Task {
                    try await withDeadline(suspendingDeadline, leeway: .microseconds(100), engine: engine) {
                        try await Self.sleepUntilCancelled { suspending.append(.now) }
                    }
                }.value
            }
            #expect(continuous.entries.allSatisfy { $0 >= continuousDeadline })
            #expect(suspending.entries.allSatisfy { $0 >= suspendingDeadline })
            ran += continuous.count + suspending.count
        }
        #expect(ran > 0, "no call began before its deadline")
        #expect(self.engine.counters.armed == 0)
    }

    @Test(.timeLimit(.minutes(1)))
    func aTimeoutLeavesTheTaskCancelled() async throws {
        let engine = self.engine
        let stillCancelled = await Task {
            _ = try? await withTimeout(.milliseconds(1), engine: engine) { try await Self.sleepUntilCancelled {} }
            return Task.isCancelled
        }.value
        #expect(stillCancelled)
    }

    /// An operation that ignores the cancellation and returns after the deadline keeps its
    /// result.
    @Test(.timeLimit(.minutes(1)))
    func aResultAfterTheDeadlineIsKept() async throws {
        let engine = self.engine
        let (value, cancelled) = try await Task {
            let value = try await withTimeout(.milliseconds(1), engine: engine) {
                while !Task.isCancelled { await Task.yield() }
                return "done"
            }
            return (value, Task.isCancelled)
        }.value
        #expect(value == "done")
        #expect(cancelled)
    }

    @Test(.timeLimit(.minutes(1)))
    func anOuterDeadlineReachesTheInnerOperation() async throws {
        let engine = self.engine
        let inner = Recorder<String>()
        let outcome = await Task {
            try await withTimeout(.milliseconds(5), engine: engine) {
                do {
                    try await withTimeout(.seconds(60), engine: engine) { try await Self.sleepUntilCancelled {} }
                } catch {
                    inner.append("\(type(of: error))")
                    throw error
                }
            }
        }.result
        #expect(throws: TimeoutError()) { try outcome.get() }
        // The inner deadline did not pass: the inner call passes the cancellation on as it is.
        #expect(inner.entries == ["CancellationError"])
        #expect(engine.counters.armed == 0)
    }

    @Test(.timeLimit(.minutes(1)))
    func anInnerDeadlineEndsOnlyTheInnerOperation() async throws {
        let engine = self.engine
        let outcome = await Task {
            try await withTimeout(.seconds(60), engine: engine) {
                let inner = await Task {
                    try await withTimeout(.milliseconds(2), engine: engine) { try await Self.sleepUntilCancelled {} }
                }.result
                #expect(throws: TimeoutError()) { try inner.get() }
                return Task.isCancelled
            }
        }.result
        #expect(try outcome.get() == false)
        #expect(engine.counters.armed == 0)
    }

    /// A task cancelled before the call still runs the operation, which sees the
    /// cancellation itself; its error is its own, not a timeout.
    @Test(.timeLimit(.minutes(1)))
    func anAlreadyCancelledTaskRunsTheOperation() async throws {
        let engine = self.engine
        let outcome = await Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await withTimeout(.seconds(60), engine: engine) {
                try Task.checkCancellation()
                return "not reached"
            }
        }.result
        #expect(throws: CancellationError.self) { try outcome.get() }
        #expect(engine.counters.armed == 0)
    }

    @Test(.timeLimit(.minutes(1)))
    func aPassedDeadlineThrowsWithoutRunning() async throws {
        let ran = Recorder<Bool>()
        await #expect(throws: TimeoutError()) {
            try await withTimeout(.zero, engine: self.engine) { ran.append(true) }
        }
        await #expect(throws: TimeoutError()) {
            try await withDeadline(SuspendingClock.now - .seconds(1), engine: self.engine) { ran.append(true) }
        }
        #expect(ran.count == 0)
        #expect(!Task.isCancelled)
    }

    @Test(.timeLimit(.minutes(1)))
    func aStoppedEngineThrowsWithoutRunning() async throws {
        let engine = try makeEngine()
        await engine.shutdown()
        let ran = Recorder<Bool>()
        await #expect(throws: TimerError.engineShutDown) {
            try await withTimeout(.seconds(1), engine: engine) { ran.append(true) }
        }
        #expect(ran.count == 0)
    }

    /// An engine that stops under a running operation can no longer keep its deadline: the
    /// operation is cancelled at once rather than left unbounded.
    @Test(.timeLimit(.minutes(1)))
    func aShutdownCancelsTheOperation() async throws {
        let engine = try makeEngine()
        let call = Task {
            try await withTimeout(.seconds(3600), engine: engine) {
                try await Self.sleepUntilCancelled {}
            }
        }
        #expect(await eventually { engine.counters.armed == 1 })
        await engine.shutdown()
        await #expect(throws: TimerError.engineShutDown) { try await call.value }
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
