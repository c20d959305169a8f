import Foundation
import MetronomeTesting
import Testing

@testable import Metronome

/// `ManualClock`, `EngineClock`, ticks, `ExpiringValue` and `TimerScheduler` on a
/// `ManualTimeline`: everything happens when the test advances time, and nothing else.
@Suite
struct VirtualTimePatternTests {
    let timeline = ManualTimeline(startingAt: ManualHarness.origin)

    // MARK: ManualClock

    @Test(.timeLimit(.minutes(1)))
    func sleepEndsWhenTheTimelineReachesTheDeadline() async throws {
        let clock = self.timeline.clock
        let deadline = clock.now.advanced(by: .seconds(30))
        let sleeper = Task {
            try await clock.sleep(until: deadline)
            return clock.now
        }
        await self.timeline.waitForArmedTimers(1)
        self.timeline.advance(by: .seconds(30) - .nanoseconds(1))
        #expect(self.timeline.armedCount == 1, "the sleep ended before its deadline")
        self.timeline.advance(by: .nanoseconds(1))
        #expect(self.timeline.armedCount == 0)
        #expect(try await sleeper.value == deadline)
    }

    @Test(.timeLimit(.minutes(1)))
    func taskSleepForRunsOnTheManualClock() async throws {
        let clock = self.timeline.clock
        let start = clock.now
        let sleeper = Task {
            try await Task.sleep(for: .seconds(5), tolerance: .seconds(1), clock: clock)
            try await Task.sleep(for: .seconds(5), clock: clock)
        }
        await self.timeline.waitForArmedTimers(1)
        self.timeline.advance(by: .seconds(5))
        await self.timeline.waitForArmedTimers(1)
        self.timeline.advance(by: .seconds(5))
        try await sleeper.value
        #expect(clock.now == start.advanced(by: .seconds(10)))
        #expect(clock.minimumResolution == .nanoseconds(1))
        #expect(clock.timeline === self.timeline)
    }

    @Test(.timeLimit(.minutes(1)))
    func cancellingASleeperDisarmsItsTimer() async throws {
        let clock = self.timeline.clock
        let sleeper = Task { try await clock.sleep(until: clock.now.advanced(by: .seconds(60))) }
        await self.timeline.waitForArmedTimers(1)
        sleeper.cancel()
        await #expect(throws: CancellationError.self) { try await sleeper.value }
        #expect(self.timeline.armedCount == 0)
    }

    @Test(.timeLimit(.minutes(1)))
    func passedDeadlineReturnsAtOnceWithoutArming() async throws {
        let clock = self.timeline.clock
        try await clock.sleep(until: clock.now)
        try await clock.sleep(until: clock.now.advanced(by: .seconds(-1)))
        #expect(self.timeline.armedCount == 0)
    }

    @Test(.timeLimit(.minutes(1)))
    func waitForArmedTimersReturnsAtOnceWhenEnoughAreArmed() async {
        await self.timeline.waitForArmedTimers(0)
        let timer = SafeDispatchTimer(backend: .custom(self.timeline))
        #expect(timer.schedule(after: .seconds(1)) { _ in })
        await self.timeline.waitForArmedTimers(1)
        #expect(self.timeline.armedCount == 1)
    }

    // MARK: EngineClock on a backend

    @Test(.timeLimit(.minutes(1)))
    func engineClockReadsAndSleepsOnItsBackend() async throws {
        let clock = EngineClock(backend: .custom(self.timeline), clock: .wall)
        #expect(clock.now == TimerInstant(nanoseconds: self.timeline.now.nanoseconds, clock: .wall))
        #expect(clock.backend.engine == nil)
        #expect(EngineClock().backend.engine === TimerEngine.shared)
        let sleeper = Task { try await clock.sleep(until: clock.now.advanced(by: .milliseconds(7))) }
        await self.timeline.waitForArmedTimers(1)
        self.timeline.advance(by: .milliseconds(7))
        try await sleeper.value
        #expect(self.timeline.armedCount == 0)
    }

    // MARK: Ticks

    @Test(.timeLimit(.minutes(1)))
    func ticksComeAsTheTimelineAdvancesWithMissedPeriodsMerged() async {
        let period = Duration.seconds(1)
        let start = self.timeline.now
        let ticks = SafeDispatchTimer.Backend.custom(self.timeline).ticks(every: period)
        #expect(ticks.backend.engine == nil)
        var iterator = ticks.makeAsyncIterator()
        #expect(self.timeline.armedCount == 1)

        // Three periods pass before the consumer asks: one tick, two missed.
        self.timeline.advance(by: period * 3)
        let merged = await iterator.next()
        #expect(merged?.sequence == 2)
        #expect(merged?.missed == 2)
        #expect(merged?.scheduled == start.advanced(by: period * 3))

        self.timeline.advance(by: period)
        let next = await iterator.next()
        #expect(next?.sequence == 3)
        #expect(next?.missed == 0)
        #expect(next?.fired == start.advanced(by: period * 4))
    }

    @Test(.timeLimit(.minutes(1)))
    func leavingTheLoopDisarmsAndABadIntervalGivesNothing() async {
        let backend = SafeDispatchTimer.Backend.custom(self.timeline)
        do {
            var iterator = backend.ticks(every: .seconds(1)).makeAsyncIterator()
            self.timeline.advance(by: .seconds(1))
            #expect(await iterator.next() != nil)
        }
        #expect(self.timeline.armedCount == 0)
        var empty = backend.ticks(every: .zero).makeAsyncIterator()
        #expect(await empty.next() == nil)
        #expect(self.timeline.armedCount == 0)
    }

    // MARK: ExpiringValue

    @Test(.timeLimit(.minutes(1)))
    func expiringValueLivesItsLifetimeFromTheLastTouch() {
        let expiries = Locked<[String]>([])
        let session = ExpiringValue("session", lifetime: .seconds(30), backend: .custom(self.timeline)) { value in
            expiries.withLock { $0.append(value) }
        }
        #expect(session.backend.engine == nil)
        self.timeline.advance(by: .seconds(29))
        #expect(session.touch())
        self.timeline.advance(by: .seconds(29))
        #expect(session.value == "session")
        self.timeline.advance(by: .seconds(1))
        #expect(session.value == nil)
        #expect(expiries.current == ["session"])
        #expect(!session.touch())
        self.timeline.advance(by: .seconds(60))
        #expect(expiries.current == ["session"], "expired twice")
        #expect(self.timeline.armedCount == 0)
    }

    @Test(.timeLimit(.minutes(1)))
    func invalidatedValueNeverExpires() {
        let expiries = Locked(0)
        let value = ExpiringValue(1, lifetime: .seconds(1), backend: .custom(self.timeline)) { _ in
            expiries.withLock { $0 += 1 }
        }
        #expect(value.invalidate() == 1)
        #expect(self.timeline.armedCount == 0)
        self.timeline.advance(by: .seconds(5))
        #expect(expiries.current == 0)
        #expect(value.isExpired)
    }

    // MARK: TimerScheduler

    @Test(.timeLimit(.minutes(1)))
    func schedulerFiresAsTheTimelineAdvances() async {
        let scheduler = TimerScheduler(backend: .custom(self.timeline))
        #expect(scheduler.backend.engine == nil)
        var events = scheduler.events.makeAsyncIterator()
        let once = scheduler.schedule(after: .seconds(2))
        let repeating = scheduler.schedule(after: .seconds(1), every: .seconds(1))
        let cancelled = scheduler.schedule(after: .seconds(10))
        #expect(scheduler.cancel(cancelled))
        #expect(await events.next() == .cancelled(cancelled))

        self.timeline.advance(by: .seconds(1) - .nanoseconds(1))
        self.timeline.advance(by: .seconds(2))
        #expect(await events.next() == .executed(repeating, willRepeat: true))
        // Equal deadlines fire in arm order.
        #expect(await events.next() == .executed(once, willRepeat: false))
        #expect(await events.next() == .executed(repeating, willRepeat: true))
        #expect(scheduler.activeTimers == [repeating])
        #expect(scheduler.cancelAll() == 1)
        #expect(await events.next() == .cancelled(repeating))
        #expect(self.timeline.armedCount == 0)
    }

    @Test(.timeLimit(.minutes(1)))
    func schedulerKeepsADelayPastTheEndOfTimeArmedAndNeverFires() async {
        let scheduler = TimerScheduler(backend: .custom(self.timeline))
        var events = scheduler.events.makeAsyncIterator()
        let never = scheduler.schedule(after: .seconds(Int64.max))
        self.timeline.advance(by: .seconds(3600))
        #expect(scheduler.activeTimers == [never])
        let marker = scheduler.schedule(after: .zero)
        self.timeline.advance(by: .zero)
        #expect(await events.next() == .executed(marker, willRepeat: false))
    }

    // MARK: Lateness in virtual time

    /// Each missed-tick policy in virtual time, after a first handler that moves time on
    /// 3.5 s (a period of 1 s): skip fires once for the 4 s deadline with 2 missed, then goes
    /// on at 5 s; burst fires the 2, 3 and 4 s deadlines back to back, then 5 s; delay fires
    /// the 2 s deadline at 4.5 s and moves the grid to 5.5 s, 6.5 s.
    @Test(
        .timeLimit(.minutes(1)),
        arguments: [
            (MissedTickPolicy.skip, [(1.0, 1.0, 0), (4.0, 4.5, 2), (5.0, 5.0, 0), (6.0, 6.0, 0)]),
            (.burst, [(1.0, 1.0, 0), (2.0, 4.5, 0), (3.0, 4.5, 0), (4.0, 4.5, 0), (5.0, 5.0, 0)]),
            (.delay, [(1.0, 1.0, 0), (2.0, 4.5, 0), (5.5, 5.5, 0), (6.5, 6.5, 0)]),
        ])
    func eachMissedTickPolicyInVirtualTime(policy: MissedTickPolicy, expected: [(Double, Double, Int)]) {
        let timeline = self.timeline
        let origin = ManualHarness.origin
        let timer = SafeDispatchTimer(backend: .custom(timeline))
        let ticks = Locked<[Tick]>([])
        #expect(
            timer.schedule(after: .seconds(1), every: .seconds(1), missedTicks: policy) { tick in
                let first = ticks.withLock { ticks in
                    ticks.append(tick)
                    return ticks.count == 1
                }
                if first { timeline.advance(by: .milliseconds(3500)) }
            })
        timeline.advance(by: .seconds(1))
        let last = expected.last!.1
        timeline.advance(to: origin.advanced(by: .milliseconds(Int64(last * 1000))))
        let seen = ticks.current.prefix(expected.count).map { tick in
            (tick.scheduled, tick.fired, tick.missed)
        }
        let want = expected.map { scheduled, fired, missed in
            (
                origin.advanced(by: .milliseconds(Int64(scheduled * 1000))),
                origin.advanced(by: .milliseconds(Int64(fired * 1000))), missed
            )
        }
        #expect(seen.count == want.count)
        for (got, expected) in zip(seen, want) {
            #expect(
                got.0 == expected.0 && got.1 == expected.1 && got.2 == expected.2, "\(policy): \(got) ≠ \(expected)")
        }
        timer.cancel()
    }

    /// A handler that moves time on 4.5 s makes its own timer late: the deadlines at 2, 3
    /// and 4 s are skipped, and the firing due at 5 s runs when the handler returns, at
    /// 5.5 s, before `advance` returns; the grid goes on at 6 s.
    @Test(.timeLimit(.minutes(1)))
    func aHandlerThatMovesTimeOnMakesItsOwnTimerLate() {
        let timeline = self.timeline
        let origin = ManualHarness.origin
        let timer = SafeDispatchTimer(backend: .custom(timeline))
        let ticks = Locked<[Tick]>([])
        #expect(
            timer.schedule(after: .seconds(1), every: .seconds(1)) { tick in
                let first = ticks.withLock { ticks in
                    ticks.append(tick)
                    return ticks.count == 1
                }
                if first { timeline.advance(by: .milliseconds(4500)) }
            })
        timeline.advance(by: .seconds(1))
        #expect(
            ticks.current == [
                Tick(
                    scheduled: origin.advanced(by: .seconds(1)), fired: origin.advanced(by: .seconds(1)), missed: 0,
                    sequence: 0),
                Tick(
                    scheduled: origin.advanced(by: .seconds(5)), fired: origin.advanced(by: .milliseconds(5500)),
                    missed: 3,
                    sequence: 4),
            ])
        #expect(ticks.current.last?.lateness == .milliseconds(500))
        #expect(timeline.now == origin.advanced(by: .milliseconds(5500)))
        timeline.advance(by: .milliseconds(500))
        #expect(
            ticks.current.last
                == Tick(
                    scheduled: origin.advanced(by: .seconds(6)), fired: origin.advanced(by: .seconds(6)), missed: 0,
                    sequence: 5))
        timer.cancel()
    }

    /// A `Tick`'s `fired` is the virtual instant its handler ran: another timer's deadline
    /// met inside a handler that moves time on runs there, on time; a deadline already
    /// behind `now` when armed runs at the next advance, late by the difference.
    @Test(.timeLimit(.minutes(1)))
    func aTicksFiredIsTheVirtualInstantItRan() {
        let timeline = self.timeline
        let origin = ManualHarness.origin
        let other = SafeDispatchTimer(backend: .custom(timeline))
        let mover = SafeDispatchTimer(backend: .custom(timeline))
        let past = SafeDispatchTimer(backend: .custom(timeline))
        let seen = Locked<[String: Tick]>([:])
        #expect(other.schedule(after: .seconds(2)) { tick in seen.withLock { $0["other"] = tick } })
        #expect(mover.schedule(after: .seconds(1)) { _ in timeline.advance(by: .seconds(2)) })
        timeline.advance(by: .seconds(1))
        #expect(seen.current["other"]?.fired == origin.advanced(by: .seconds(2)))
        #expect(seen.current["other"]?.lateness == .zero)
        #expect(timeline.now == origin.advanced(by: .seconds(3)))

        #expect(past.schedule(at: origin.advanced(by: .seconds(1))) { tick in seen.withLock { $0["past"] = tick } })
        timeline.advance(by: .zero)
        #expect(seen.current["past"]?.scheduled == origin.advanced(by: .seconds(1)))
        #expect(seen.current["past"]?.fired == origin.advanced(by: .seconds(3)))
        #expect(seen.current["past"]?.lateness == .seconds(2))
    }
}
