@preconcurrency import Dispatch
import Glibc
import Metronome
import MetronomeTestSupport
import Synchronization
import Testing

/// A handler that blocks for 300 ms (a log flush, a lock held too long) holds up no other
/// timer, deadline or sleep of its engine: another timer due 50 ms into the block fires, and
/// a 50 ms deadline in an unrelated task expires, before the blocked handler returns. Asserted as
/// an order, whatever the load; the lateness behind the block is printed, and is measured by
/// the core's contract test.
@Suite(.serialized)
struct BlockedHandlerTests {
    enum Engine: String, CaseIterable, CustomTestStringConvertible, Sendable {
        case shared, ownEngine
        var testDescription: String { self.rawValue }
    }

    @Test(
        .timeLimit(.minutes(1)),
        .needsTheEngine("the standby is the engine's: without it GCD's stand-in runs handlers on one serial queue"),
        arguments: Engine.allCases)
    func aBlockedHandlerHoldsUpNoOtherTimerOrDeadline(engine choice: Engine) async throws {
        let engine = choice == .shared ? TimerEngine.shared : try TimerEngine()
        let blockEnded = Atomic<Bool>(false)
        let blocked = SafeDispatchTimer(backend: .engine(engine))
        let other = SafeDispatchTimer(backend: .engine(engine))
        let otherFired = DispatchSemaphore(value: 0)
        let otherBeforeTheEnd = Atomic<Bool>(false)
        let otherLateness = Atomic<Int64>(0)
        #expect(
            blocked.schedule(deadline: .now()) { _ in
                usleep(300_000)
                blockEnded.store(true, ordering: .sequentiallyConsistent)
            })
        #expect(
            other.schedule(deadline: .now() + .milliseconds(50)) { tick in
                otherBeforeTheEnd.store(!blockEnded.load(ordering: .sequentiallyConsistent), ordering: .relaxed)
                otherLateness.store(tick.fired.nanoseconds - tick.scheduled.nanoseconds, ordering: .relaxed)
                otherFired.signal()
            })
        // A deadline of an unrelated task, on the same engine's clock: its expiry cancels the
        // task from the engine's thread, which records whether the block was still on. (When
        // the body sees it depends on the cooperative pool, which a loaded suite holds up.)
        let cancelledDuringTheBlock = Atomic<Int>(0)
        let clock = EngineClock(backend: .engine(engine))
        await withDeadline(clock.now.advanced(by: .milliseconds(50)), clock: clock) {
            await withTaskCancellationHandler {
                while !Task.isCancelled { try? await Task.sleep(for: .milliseconds(1)) }
            } onCancel: {
                cancelledDuringTheBlock.store(
                    blockEnded.load(ordering: .sequentiallyConsistent) ? 2 : 1, ordering: .sequentiallyConsistent)
            }
        }
        let deadlineEndedBeforeTheBlock = cancelledDuringTheBlock.load(ordering: .sequentiallyConsistent) == 1
        #expect(otherFired.wait(timeout: .now() + 10) == .success)
        let otherFirst = otherBeforeTheEnd.load(ordering: .relaxed)
        #expect(otherFirst, "the other timer waited for the blocked handler")
        #expect(deadlineEndedBeforeTheBlock, "the deadline waited for the blocked handler")
        print(
            "behind a 300 ms handler on the \(choice) engine, a timer fired \(otherLateness.load(ordering: .relaxed) / 1_000) µs late"
        )
        await blocked.cancelAndAwaitHandlers()
        await other.cancelAndAwaitHandlers()
        #expect(engine.counters.takeovers >= 1)
        if choice == .ownEngine { await engine.shutdown() }
    }
}
