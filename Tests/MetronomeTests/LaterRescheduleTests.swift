@preconcurrency import Dispatch
import Glibc
import Synchronization
import Testing

@testable import Metronome

/// Several threads push their one-shots later while old deadlines pass and cancels come in:
/// every timer fires at most once, only for the last deadline it accepted, never before it,
/// and never after a cancel that returned `true`.
@Suite(.serialized, .tags(.realTime))
struct LaterRescheduleTests {
    /// One timer as its pushing thread sees it.
    struct Pushed {
        let timer: SafeDispatchTimer
        let firings = OneShotFirings()
        /// The deadline of the last schedule the timer accepted.
        var deadline: TimerInstant
        var cancelled = false
        /// A push returned `false`: the timer had fired, and is idle.
        var finished = false
    }

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.real, [false, true])
    func timersPushedLaterFromManyThreadsFireOnceAtTheirLastDeadline(kind: HarnessKind, onQueue: Bool) throws {
        let harness = try kind.make()
        defer { harness.tearDown() }
        let threads = 4
        let timersPerThread = 100
        let results = LockedBox<[[Pushed]]>([])

        DispatchQueue.concurrentPerform(iterations: threads) { thread in
            var rng = SystemRandomNumberGenerator()
            // On a queue, a firing reaches the timer there, as a handler does.
            let queue = onQueue ? DispatchQueue(label: "metronome.tests.later-\(thread)") : nil
            let timers = (0..<timersPerThread).map { _ in harness.makeTimer(queue: queue) }
            // Due once every timer is made, however slowly (a sanitizer, a loaded machine),
            // and pushed on before then, so that pushes race the passing deadlines.
            let first = harness.now.advanced(by: .milliseconds(10))
            var pushed = timers.map { Pushed(timer: $0, deadline: first) }
            for index in pushed.indices {
                let firings = pushed[index].firings
                let accepted = pushed[index].timer.schedule(deadline: pushed[index].deadline.dispatchTime) {
                    firings.record($0, now: harness.handlerClock())
                }
                #expect(accepted)
            }
            // Push for long enough that many first deadlines pass meanwhile, each later
            // than the last (the deadlines of the passing ones are re-armed for).
            let end = harness.now.advanced(by: .milliseconds(40))
            while harness.now < end {
                let index = Int.random(in: pushed.indices, using: &rng)
                guard !pushed[index].finished, !pushed[index].cancelled else { continue }
                let later = max(
                    pushed[index].deadline.advanced(by: .microseconds(1)),
                    harness.now.advanced(by: .microseconds(Int64.random(in: 100...3_000, using: &rng))))
                if pushed[index].timer.reschedule(deadline: later.dispatchTime) {
                    pushed[index].deadline = later
                } else {
                    pushed[index].finished = true
                }
                if Int.random(in: 0..<50, using: &rng) == 0 {
                    pushed[index].cancelled = pushed[index].timer.cancel()
                    pushed[index].finished = !pushed[index].cancelled
                }
            }
            results.withLockedValue { $0.append(pushed) }
        }

        let all = results.withLockedValue { $0.flatMap { $0 } }
        #expect(all.count == threads * timersPerThread)
        let expected = all.filter { !$0.cancelled }.count
        #expect(
            harness.eventually(timeout: .seconds(10)) {
                all.filter { $0.firings.count.load(ordering: .acquiring) > 0 }.count >= expected
            })
        harness.advance(by: .milliseconds(20))
        for pushed in all {
            let count = pushed.firings.count.load(ordering: .acquiring)
            if pushed.cancelled {
                #expect(count == 0, "a timer fired after a cancel returned true")
                continue
            }
            #expect(count == 1, "fired \(count) times")
            let scheduled = pushed.firings.scheduled.load(ordering: .relaxed)
            #expect(scheduled == pushed.deadline.nanoseconds, "fired for a deadline it had left")
            #expect(pushed.firings.clock.load(ordering: .relaxed) >= scheduled, "fired early")
            #expect(pushed.timer.state == .idle)
        }
    }

    /// Counts its deinits: a handler that captures one is let go of when it is freed.
    final class Canary: Sendable {
        final class Count: Sendable {
            let value = Atomic(0)
        }

        let freed: Count
        init(_ freed: Count) { self.freed = freed }
        deinit { self.freed.value.add(1, ordering: .releasing) }
    }

    /// A shutdown that comes as the old deadlines pass, among timers pushed later: each
    /// timer ends cancelled, with no handler run and its handler let go of. The shutdown
    /// lands at a different point in each round.
    @Test(.timeLimit(.minutes(1)), arguments: [0, 500, 1_000, 1_500, 2_000, 3_000])
    func aShutdownAmongPushedTimersCancelsEveryTimer(shutdownAfterMicroseconds: Int) throws {
        let engine = try TimerEngine()
        let count = 2_000
        let fired = Atomic(0)
        let freed = Canary.Count()
        let timers = (0..<count).map { _ in SafeDispatchTimer(backend: .engine(engine)) }
        let first = TimerClock.monotonic.now().advanced(by: .milliseconds(5))
        // A push that comes after its timer fired (a stall here) is refused, and that
        // firing was a rightful one.
        var firedBeforeItsPush = 0
        for (index, timer) in timers.enumerated() {
            let canary = Canary(freed)
            let deadline = first.advanced(by: .nanoseconds(index * 1_000))
            #expect(
                timer.schedule(at: deadline) { _ in
                    withExtendedLifetime(canary) { _ = fired.add(1, ordering: .relaxed) }
                })
            if !timer.reschedule(after: .seconds(3600)) { firedBeforeItsPush += 1 }
        }
        let shutdownAt = first.advanced(by: .microseconds(shutdownAfterMicroseconds))
        while TimerClock.monotonic.now() < shutdownAt {}
        engine.syncShutdown()

        #expect(timers.filter { $0.state == .cancelled }.count == count - firedBeforeItsPush)
        #expect(fired.load(ordering: .relaxed) == firedBeforeItsPush, "a handler ran for a deadline it had left")
        let deadline = TimerClock.monotonic.now().advanced(by: .seconds(5))
        while freed.value.load(ordering: .acquiring) < count, TimerClock.monotonic.now() < deadline {
            usleep(1_000)
        }
        #expect(freed.value.load(ordering: .acquiring) == count, "handlers kept after the shutdown")
    }
}
