// Handlers on a queue: one timer's never overlap, whatever the queue, and one that falls
// behind gets the latest firing with the skipped periods counted, not a backlog.
@preconcurrency import Dispatch
import Glibc
import Metronome
import MetronomeTesting
import Synchronization
import Testing

@Suite(.serialized, .tags(.realTime))
struct SafeDispatchTimerQueueTests {
    /// The handlers running now and the most that ever ran at once.
    private final class Overlap: Sendable {
        private let running = Atomic<Int>(0)
        private let most = Atomic<Int>(0)
        private let ticks = LockedCondition([Tick]())

        func enter(_ tick: Tick) {
            let now = self.running.add(1, ordering: .sequentiallyConsistent).newValue
            _ = self.most.max(now, ordering: .relaxed)
            self.ticks.withLock { $0.append(tick) }
        }

        func leave() {
            _ = self.running.subtract(1, ordering: .sequentiallyConsistent)
        }

        var mostAtOnce: Int { self.most.load(ordering: .relaxed) }
        var seen: [Tick] { self.ticks.withLock { $0 } }
    }

    /// A repeating timer on a concurrent queue whose first handler waits for a second one to
    /// start, while the timer keeps firing and is rescheduled (on GCD, a new source): none
    /// starts until the first returns, as with a dispatch source.
    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.real)
    func handlersOfOneTimerNeverOverlapOnAConcurrentQueue(kind: HarnessKind) throws {
        let harness = try kind.make()
        defer { harness.tearDown() }
        let queue = DispatchQueue(label: "metronome.tests.concurrent", attributes: .concurrent)
        let timer = harness.makeTimer(queue: queue)
        let overlap = Overlap()
        let isFirst = Atomic<Bool>(true)
        let firstRuns = DispatchSemaphore(value: 0)
        let secondRuns = DispatchSemaphore(value: 0)
        let handler: @Sendable (Tick) -> Void = { tick in
            overlap.enter(tick)
            if isFirst.exchange(false, ordering: .relaxed) {
                firstRuns.signal()
                _ = secondRuns.wait(timeout: .now() + .milliseconds(300))
            } else {
                secondRuns.signal()
            }
            overlap.leave()
        }
        #expect(timer.schedule(after: .milliseconds(1), every: .milliseconds(2), handler: handler))
        try #require(firstRuns.wait(timeout: .now() + 10) == .success)
        #expect(timer.reschedule(after: .milliseconds(1), every: .milliseconds(2)))
        #expect(eventually { overlap.seen.count >= 3 })
        timer.cancelAndWait()
        #expect(overlap.mostAtOnce == 1)
    }

    /// An engine shut down while a timer's handler runs on its queue and a later firing waits
    /// its turn: the timer is cancelled, the waiting firing runs no handler, and
    /// `cancelAndWait` returns once the running one has.
    @Test(.needsTheEngine("waits on the engine's count of firings"), .timeLimit(.minutes(1)))
    func aShutdownWhileAFiringWaitsForItsHandlerRunsNoMore() throws {
        let engine = try TimerEngine()
        let timer = SafeDispatchTimer(queue: DispatchQueue(label: "metronome.tests.serial"), backend: .engine(engine))
        let calls = Atomic<Int>(0)
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        #expect(
            timer.schedule(after: .milliseconds(1), every: .milliseconds(1)) { _ in
                guard calls.add(1, ordering: .relaxed).newValue == 1 else { return }
                entered.signal()
                release.wait()
            })
        try #require(entered.wait(timeout: .now() + 10) == .success)
        // Periods pass: the next firing waits behind the running handler.
        #expect(eventually { engine.counters.fired >= 3 })
        engine.syncShutdown()
        #expect(timer.state == .cancelled)
        release.signal()
        // Time for the waiting firing to reach the queue, before any cancel of ours.
        usleep(20_000)
        #expect(calls.load(ordering: .relaxed) == 1, "a handler ran after the shutdown")
        timer.cancelAndWait()
    }

    /// A handler that takes ten periods, on a serial queue: each firing it runs for is the
    /// latest, its `missed` counting the periods skipped since the one before, so that the
    /// sequence keeps up with time rather than with the handler.
    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.real)
    func aSlowHandlerOnASerialQueueGetsTheLatestFiringNotABacklog(kind: HarnessKind) throws {
        let harness = try kind.make()
        defer { harness.tearDown() }
        let timer = harness.makeTimer(queue: DispatchQueue(label: "metronome.tests.serial"))
        let overlap = Overlap()
        #expect(
            timer.schedule(after: .milliseconds(1), every: .milliseconds(1)) { tick in
                overlap.enter(tick)
                usleep(10_000)
                overlap.leave()
            })
        usleep(300_000)
        timer.cancelAndWait()
        let ticks = overlap.seen
        try #require(ticks.count >= 2, "\(ticks.count) ticks")
        for (previous, tick) in zip(ticks, ticks.dropFirst()) {
            #expect(tick.sequence == previous.sequence + UInt64(tick.missed) + 1, "\(previous) then \(tick)")
        }
        // A backlog would run every deadline in turn, none skipped.
        #expect(ticks.dropFirst().contains { $0.missed > 0 }, "every firing ran: a backlog")
        #expect(overlap.mostAtOnce == 1)
        // The engine fired on time and counted each firing; those that waited reach the
        // handlers in a later tick's `missed`, and the one waiting at the cancel not at all.
        // GCD, standing in for a compiled-out engine, counts none.
        if isEngineCompiledIn, let engine = (harness as? EngineHarness)?.engine {
            let counters = engine.counters
            let missedSeen = ticks.reduce(UInt64(0)) { $0 + UInt64($1.missed) }
            #expect(UInt64(ticks.count) + missedSeen <= counters.fired + counters.missedPeriods, "\(counters)")
            #expect(missedSeen > counters.missedPeriods, "no firing waited: \(counters)")
        }
    }
}

@Suite
struct SafeDispatchTimerNestedFiringTests {
    /// On virtual time a handler that advances the timeline fires its own timer on its own
    /// stack: that firing waits for the handler to return and then runs on the same thread,
    /// before `advance` returns, as a virtual timeline runs every handler, whatever queue
    /// the timer was given (here one never drained), not on that queue.
    @Test func aFiringThatCameDuringItsHandlerRunsOnTheAdvancingThread() {
        let timeline = ManualTimeline()
        let idle = DispatchQueue(label: "metronome.tests.suspended")
        idle.suspend()
        defer { idle.resume() }
        let timer = SafeDispatchTimer(queue: idle, backend: .custom(timeline))
        let ticks = LockedCondition([Tick]())
        let advancer = pthread_self()
        let elsewhere = Atomic<Int>(0)
        #expect(
            timer.schedule(after: .seconds(1), every: .seconds(1)) { tick in
                let isOuter = ticks.withLock { ticks in
                    ticks.append(tick)
                    return ticks.count == 1
                }
                if pthread_equal(pthread_self(), advancer) == 0 { elsewhere.add(1, ordering: .relaxed) }
                if isOuter { timeline.advance(by: .seconds(1)) }
            })
        timeline.advance(by: .seconds(1))
        let seen = ticks.withLock { $0 }
        #expect(seen.map(\.sequence) == [0, 1])
        #expect(elsewhere.load(ordering: .relaxed) == 0)
        timer.cancel()
    }
}
