@preconcurrency import Dispatch
import Foundation
import MetronomeTesting
import Synchronization
import Testing

@testable import Metronome

/// One behaviour suite, three harnesses: virtual time (`ManualTimeline`), a fresh
/// `TimerEngine` and GCD. The bodies only use `harness.now`, `advance(by:)` and `wait(...)`,
/// so the same expectations hold in virtual and in real time.
@Suite(.serialized, .tags(.realTime))
struct SafeDispatchTimerBehaviourTests {
    /// The period of the repeating timers; virtual time uses the same numbers.
    static let period = Duration.milliseconds(20)

    // MARK: One-shot

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func oneShotFiresOnceAndGoesIdle(kind: HarnessKind) throws {
        let (harness, recorder, timer) = try kind.makeRecordedTimer()
        defer { harness.tearDown() }
        let deadline = harness.now.advanced(by: Self.period)

        #expect(timer.schedule(deadline: deadline.dispatchTime, handler: recorder.handler))
        #expect(timer.state == .running)
        #expect(harness.wait(for: recorder, count: 1), "the one-shot never fired")
        #expect(timer.state == .idle, "a fired one-shot is idle again")

        harness.advance(by: Self.period * 5)
        let records = recorder.all
        try #require(records.count == 1, "a one-shot fired \(records.count) times")
        let tick = records[0].tick
        #expect(tick.scheduled == deadline)
        #expect(tick.sequence == 0)
        #expect(tick.missed == 0)
        #expect(tick.fired >= tick.scheduled)
        #expect(records[0].clock >= tick.scheduled)
        #expect(timer.state == .idle)
        if let armed = harness.armedCount {
            #expect(armed == 0, "nothing stays armed after a one-shot fired")
        }
    }

    // MARK: Repeating

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func repeatingFiresOnItsGrid(kind: HarnessKind) throws {
        let (harness, recorder, timer) = try kind.makeRecordedTimer()
        defer { harness.tearDown() }
        let start = harness.now.advanced(by: Self.period)

        #expect(
            timer.schedule(
                deadline: start.dispatchTime,
                repeating: .nanoseconds(Int(Self.period.nanoseconds)),
                handler: recorder.handler
            )
        )
        #expect(harness.wait(for: recorder, count: 5), "only \(recorder.count) of 5 ticks arrived")
        #expect(timer.state == .running, "a repeating timer stays running")
        #expect(timer.cancel())

        let ticks = Array(recorder.ticks.prefix(5))
        try #require(ticks.count == 5)
        Self.expectOnGrid(ticks, start: start, period: Self.period, exact: harness.isVirtual)
    }

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func scheduleIntervalRepeatsEveryInterval(kind: HarnessKind) throws {
        let harness = try kind.make()
        defer { harness.tearDown() }
        let recorder = Locked<[TimerInstant]>([])
        let notifier = Notifier()
        let timer = harness.makeTimer()
        let before = harness.now

        #expect(
            timer.schedule(interval: Self.period.inSeconds) {
                let now = harness.handlerClock()
                recorder.withLock { $0.append(now) }
                notifier.notify()
            }
        )
        let after = harness.now
        #expect(harness.wait(for: notifier) { recorder.current.count >= 3 })
        #expect(timer.cancel())
        let times = recorder.current
        try #require(times.count >= 3)
        // First firing no earlier than `interval` after the call.
        #expect(times[0] >= before.advanced(by: Self.period))
        if harness.isVirtual {
            #expect(times[0] == after.advanced(by: Self.period))
            #expect(times[1] == times[0].advanced(by: Self.period))
            #expect(times[2] == times[1].advanced(by: Self.period))
        }
    }

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func scheduleAtInstantFollowsItsPeriod(kind: HarnessKind) throws {
        let (harness, recorder, timer) = try kind.makeRecordedTimer()
        defer { harness.tearDown() }
        let start = harness.now.advanced(by: Self.period)

        #expect(timer.schedule(at: start, every: Self.period * 2, handler: recorder.handler))
        #expect(harness.wait(for: recorder, count: 3))
        #expect(timer.cancel())
        let ticks = Array(recorder.ticks.prefix(3))
        try #require(ticks.count == 3)
        Self.expectOnGrid(ticks, start: start, period: Self.period * 2, exact: harness.isVirtual)
    }

    /// A repeating timer whose first deadline has already passed when it is armed is late
    /// by many periods: it fires once, reporting the skipped deadlines in `missed`, and does
    /// not burst to catch up (`Tick.missed`).
    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func repeatingTimerArmedLateSkipsAheadInsteadOfBursting(kind: HarnessKind) throws {
        let (harness, recorder, timer) = try kind.makeRecordedTimer()
        defer { harness.tearDown() }
        let period = Self.period
        // Ten and a half periods ago.
        let start = harness.now.advanced(by: .zero - (period * 10 + period / 2))

        #expect(
            timer.schedule(
                deadline: start.dispatchTime, repeating: .nanoseconds(Int(period.nanoseconds)),
                handler: recorder.handler))
        #expect(harness.wait(for: recorder, count: 2))
        #expect(timer.cancel())
        let ticks = Array(recorder.ticks.prefix(2))
        try #require(ticks.count == 2)
        #expect(
            ticks[0].sequence >= 10, "the first firing stands for deadline \(ticks[0].sequence), long passed: \(ticks)")
        #expect(ticks[0].missed == Int(ticks[0].sequence), "the skipped deadlines are reported as missed: \(ticks)")
        #expect(
            ticks[1].scheduled > ticks[0].fired, "a second firing for a deadline already passed at the first: a burst")
        Self.expectOnGrid(ticks, start: start, period: period, exact: false)
    }

    /// A handler that overruns several periods gets one tick for the latest deadline that
    /// passed, reporting the ones skipped, then continues on the grid: no burst, no drift.
    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.real)
    func overrunningHandlerGetsOneTickReportingTheSkippedPeriods(kind: HarnessKind) throws {
        let (harness, recorder, timer) = try kind.makeRecordedTimer()
        defer { harness.tearDown() }
        let period = Self.period
        let start = harness.now.advanced(by: period)
        let overran = Atomic<Bool>(false)
        #expect(
            timer.schedule(deadline: start.dispatchTime, repeating: .nanoseconds(Int(period.nanoseconds))) { tick in
                recorder.record(tick)
                // The first tick, whichever deadline it stands for on a busy machine,
                // overruns three and a half periods.
                if !overran.exchange(true, ordering: .relaxed) { realSleep(period * 3 + period / 2) }
            }
        )
        #expect(harness.wait(for: recorder, count: 3))
        #expect(timer.cancel())
        let ticks = Array(recorder.ticks.prefix(3))
        try #require(ticks.count == 3)
        Self.expectOnGrid(ticks, start: start, period: period, exact: false)
        #expect(ticks[1].missed >= 2, "the overrun skipped deadlines without reporting them: \(ticks)")
        #expect(
            ticks[1].scheduled <= ticks[1].fired && ticks[1].fired < ticks[1].scheduled.advanced(by: period),
            "not the latest passed deadline: \(ticks)")
    }

    // MARK: Suspend and resume

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func suspendStopsFiringAndResumeKeepsThePhase(kind: HarnessKind) throws {
        let (harness, recorder, timer) = try kind.makeRecordedTimer()
        defer { harness.tearDown() }
        let period = Self.period
        let start = harness.now.advanced(by: period)

        #expect(
            timer.schedule(
                deadline: start.dispatchTime,
                repeating: .nanoseconds(Int(period.nanoseconds)),
                handler: recorder.handler
            )
        )
        #expect(harness.wait(for: recorder, count: 2))

        #expect(timer.suspend())
        let suspendedEpoch = recorder.bumpEpoch()
        #expect(timer.state == .suspended)
        #expect(!timer.suspend(), "suspending twice is a no-op")
        if let armed = harness.armedCount { #expect(armed == 0, "a suspended timer has nothing armed") }

        // Over several periods nothing fires, except at most one firing already under way.
        harness.advance(by: period * 5 + .milliseconds(3))
        let whileSuspended = recorder.records(since: suspendedEpoch)
        #expect(whileSuspended.count <= (harness.isVirtual ? 0 : 1), "fired while suspended: \(whileSuspended)")

        let resumedAt = harness.now
        #expect(timer.resume())
        let resumedEpoch = recorder.bumpEpoch()
        #expect(timer.state == .running)
        #expect(!timer.resume(), "resuming a running timer is a no-op")
        #expect(harness.wait(for: recorder.notifier) { recorder.records(since: resumedEpoch).count >= 2 })
        #expect(timer.cancel())

        // Every tick, before and after the pause, lies on the original grid.
        for record in recorder.all {
            let offset = record.tick.scheduled.nanoseconds - start.nanoseconds
            #expect(offset % period.nanoseconds == 0, "tick \(record.tick) is off the phase of \(start)")
            #expect(record.tick.fired >= record.tick.scheduled)
        }
        // The first tick after the resume is the first grid point at or after the resume;
        // the periods that passed while suspended are skipped, not reported as missed.
        let afterResume = recorder.records(since: resumedEpoch).map(\.tick)
        let first = try #require(afterResume.first)
        #expect(first.scheduled >= resumedAt)
        if harness.isVirtual {
            #expect(first.scheduled < resumedAt.advanced(by: period))
            #expect(first.missed == 0)
        }
    }

    /// In virtual time a resume can land on the very instant a repeating deadline was
    /// delivered: here a handler pauses and unpauses its own timer. Resuming at "the first
    /// `d + k·p` at or after `now`" (StateMachine.md) would deliver that deadline again, and
    /// again: without the cap below, `advance` would never return. The resume must continue
    /// strictly after `now` (`TimerSchedule.resumed(at:)`).
    @Test(.timeLimit(.minutes(1))) func resumeAtTheInstantOfADeliveredDeadlineDoesNotDeliverItAgain() {
        let harness = ManualHarness()
        let recorder = TickRecorder(harness)
        let timer = harness.makeTimer()
        let weak = WeakTimer(timer)
        let start = harness.now.advanced(by: Self.period)
        #expect(
            timer.schedule(deadline: start.dispatchTime, repeating: .nanoseconds(Int(Self.period.nanoseconds))) {
                tick in
                recorder.record(tick)
                guard recorder.count < 5, let timer = weak.timer else { return }  // the cap
                _ = timer.suspend()
                _ = timer.resume()
            }
        )
        harness.advance(by: Self.period * 2)
        #expect(
            recorder.ticks.map(\.scheduled) == [start, start.advanced(by: Self.period)],
            "a deadline delivered at the resume instant was delivered again"
        )
        timer.cancel()
    }

    // MARK: Cancel

    /// Cancelled while its second handler runs (held there on real time, so that the
    /// firing in flight is known and recorded before the cancel): no handler starts after
    /// `cancel()` returned, shown by a second timer due five periods later having fired.
    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func cancelStopsFiring(kind: HarnessKind) throws {
        let (harness, recorder, timer) = try kind.makeRecordedTimer()
        defer { harness.tearDown() }
        let held = harness.isVirtual ? nil : HeldFiring(at: 2)

        #expect(
            timer.schedule(
                deadline: harness.deadline(after: Self.period),
                repeating: .nanoseconds(Int(Self.period.nanoseconds))
            ) { tick in
                recorder.record(tick)
                held?.enter()
            }
        )
        if let held { #expect(held.waitUntilHeld()) } else { #expect(harness.wait(for: recorder, count: 2)) }
        #expect(timer.cancel())
        let cancelledEpoch = recorder.bumpEpoch()
        held?.release()
        #expect(timer.state == .cancelled)
        #expect(!timer.cancel(), "cancelling twice is a no-op")
        if let armed = harness.armedCount { #expect(armed == 0) }

        #expect(Self.firesAnotherTimer(on: harness, after: Self.period * 5))
        let late = recorder.records(since: cancelledEpoch)
        #expect(late.isEmpty, "fired after cancel returned: \(late)")
        #expect(timer.state == .cancelled)
    }

    /// Cancelled while its first handler runs (held there on real time), then started
    /// again: the new schedule fires, and no handler of the old one starts after the cancel
    /// returned, though three of the new schedule's, later, did.
    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func scheduleAfterCancelStartsAgain(kind: HarnessKind) throws {
        let harness = try kind.make()
        defer { harness.tearDown() }
        let first = TickRecorder(harness)
        let second = TickRecorder(harness)
        let timer = harness.makeTimer()
        let interval = DispatchTimeInterval.nanoseconds(Int(Self.period.nanoseconds))
        let held = harness.isVirtual ? nil : HeldFiring(at: 1)

        #expect(
            timer.schedule(deadline: harness.deadline(after: Self.period), repeating: interval) { tick in
                first.record(tick)
                held?.enter()
            })
        if let held { #expect(held.waitUntilHeld()) } else { #expect(harness.wait(for: first, count: 1)) }
        #expect(timer.cancel())
        let cancelledEpoch = first.bumpEpoch()
        held?.release()

        let restart = harness.now.advanced(by: Self.period)
        #expect(timer.schedule(deadline: restart.dispatchTime, repeating: interval, handler: second.handler))
        #expect(timer.state == .running)
        #expect(harness.wait(for: second, count: 3), "the restarted timer did not fire")
        #expect(timer.cancel())

        #expect(first.records(since: cancelledEpoch).isEmpty, "the old handler ran again")
        Self.expectOnGrid(Array(second.ticks.prefix(3)), start: restart, period: Self.period, exact: harness.isVirtual)
    }

    // MARK: Reschedule

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func rescheduleLaterSkipsTheOldDeadline(kind: HarnessKind) throws {
        let (harness, recorder, timer) = try kind.makeRecordedTimer()
        defer { harness.tearDown() }
        // Far enough out that the reschedule surely comes first, even on a loaded machine.
        let old = harness.now.advanced(by: Self.period * 10)
        let new = old.advanced(by: Self.period * 3)

        #expect(timer.schedule(deadline: old.dispatchTime, handler: recorder.handler))
        #expect(timer.reschedule(deadline: new.dispatchTime))
        #expect(timer.state == .running)
        #expect(harness.wait(for: recorder, count: 1))
        harness.advance(by: Self.period * 3)

        let ticks = recorder.ticks
        #expect(ticks.count == 1, "fired \(ticks.count) times: \(ticks)")
        #expect(ticks.first?.scheduled == new, "the old deadline \(old) fired")
        #expect(ticks.allSatisfy { $0.fired >= new })
        #expect(timer.state == .idle)
    }

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func rescheduleEarlierFiresAtTheNewDeadline(kind: HarnessKind) throws {
        let (harness, recorder, timer) = try kind.makeRecordedTimer()
        defer { harness.tearDown() }
        let old = harness.now.advanced(by: .seconds(3600))

        #expect(timer.schedule(deadline: old.dispatchTime, handler: recorder.handler))
        let new = harness.now.advanced(by: Self.period)
        #expect(timer.reschedule(deadline: new.dispatchTime))
        #expect(harness.wait(for: recorder, count: 1))
        let tick = try #require(recorder.ticks.first)
        #expect(tick.scheduled == new)
        #expect(tick.fired >= new)
        #expect(timer.state == .idle)
    }

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func rescheduleMovesARepeatingTimerToANewGrid(kind: HarnessKind) throws {
        let (harness, recorder, timer) = try kind.makeRecordedTimer()
        defer { harness.tearDown() }
        let period = Self.period
        let oldStart = harness.now.advanced(by: period)

        #expect(
            timer.schedule(
                deadline: oldStart.dispatchTime, repeating: .nanoseconds(Int(period.nanoseconds)),
                handler: recorder.handler)
        )
        #expect(harness.wait(for: recorder, count: 2))
        // A new grid, off the old phase by half a period, twice as slow.
        let newStart = harness.now.advanced(by: period + period / 2)
        #expect(timer.reschedule(deadline: newStart.dispatchTime, repeating: .nanoseconds(Int(period.nanoseconds * 2))))
        let rescheduledEpoch = recorder.bumpEpoch()
        #expect(harness.wait(for: recorder.notifier) { recorder.records(since: rescheduledEpoch).count >= 3 })
        #expect(timer.cancel())

        var stale = 0
        for record in recorder.records(since: rescheduledEpoch) {
            let onNewGrid =
                record.tick.scheduled >= newStart
                && (record.tick.scheduled.nanoseconds - newStart.nanoseconds) % (period.nanoseconds * 2) == 0
            if !onNewGrid { stale += 1 }
        }
        // At most the one firing that was under way when `reschedule` returned.
        #expect(stale <= (harness.isVirtual ? 0 : 1), "\(stale) firings of the old schedule after reschedule returned")
    }

    // MARK: Never early

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases, [false, true])
    func neverFiresBeforeItsDeadline(kind: HarnessKind, onQueue: Bool) throws {
        let harness = try kind.make()
        defer { harness.tearDown() }
        let queue = onQueue ? markedQueue("metronome.tests.never-early") : nil
        let shared = Notifier()
        let recorders = (0..<6).map { _ in TickRecorder(harness, notifier: shared) }
        let timers = recorders.map { _ in harness.makeTimer(queue: queue) }
        // A fast repeating timer, plus one-shots at awkward offsets.
        let start = harness.now.advanced(by: .microseconds(1_500))
        #expect(
            timers[0].schedule(
                deadline: start.dispatchTime, repeating: .microseconds(2_500), handler: recorders[0].handler))
        let offsets: [Duration] = [
            .microseconds(700), .milliseconds(3), .microseconds(5_333), .milliseconds(11), .microseconds(17_001),
        ]
        for (index, offset) in offsets.enumerated() {
            #expect(
                timers[index + 1].schedule(
                    deadline: harness.deadline(after: offset), handler: recorders[index + 1].handler))
        }
        let allRecorders = recorders
        let done = harness.wait(for: shared) {
            allRecorders[0].count >= 15 && allRecorders.dropFirst().allSatisfy { $0.count == 1 }
        }
        #expect(done, "counts: \(recorders.map(\.count))")
        _ = timers.map { $0.cancel() }

        for record in recorders.flatMap(\.all) {
            #expect(record.tick.fired >= record.tick.scheduled, "tick reported early: \(record.tick)")
            #expect(
                record.clock >= record.tick.scheduled,
                "handler woke \(record.tick.scheduled.duration(to: record.clock)) early: \(record.tick)")
            if harness.isVirtual {
                #expect(record.tick.fired == record.tick.scheduled, "virtual time fires at the deadline itself")
            } else {
                #expect(record.onMarkedQueue == onQueue, "handler ran on the wrong queue")
            }
        }
    }

    // MARK: Helpers

    /// Schedules another timer on `harness`, due `delay` from now, and waits for it: by
    /// then a handler of a timer due earlier on the same engine would have run.
    static func firesAnotherTimer(on harness: any TimerHarness, after delay: Duration) -> Bool {
        let probe = TickRecorder(harness)
        let timer = harness.makeTimer()
        defer { timer.cancel() }
        guard timer.schedule(deadline: harness.deadline(after: delay), handler: probe.handler) else { return false }
        return harness.wait(for: probe, count: 1)
    }

    /// Holds a timer's `n`th handler until released, so that a cancel made meanwhile has
    /// exactly one firing in flight: the held one, recorded before the cancel (handlers of
    /// one timer never overlap).
    final class HeldFiring: Sendable {
        private let heldAt: Int
        private let entered = LockedCondition(0)
        private let released = LockedCondition(false)

        init(at heldAt: Int) {
            self.heldAt = heldAt
        }

        /// Called by the handler on entry.
        func enter() {
            let count = self.entered.update { entered in
                entered += 1
                return entered
            }
            if count == self.heldAt { _ = self.released.wait(timeout: .seconds(10)) { $0 } }
        }

        func waitUntilHeld() -> Bool {
            self.entered.wait(timeout: .seconds(5)) { $0 >= self.heldAt }
        }

        func release() {
            self.released.update { $0 = true }
        }
    }

    /// The blocking call, from a synchronous context as its `noasync` mark asks.
    static func cancelAndWait(_ timer: SafeDispatchTimer) {
        timer.cancelAndWait()
    }

    /// Ticks of one schedule: `scheduled == start + sequence · period`, sequences advance by
    /// `missed + 1`, and nothing is early. In virtual time: 0, 1, 2, … exactly, on time.
    static func expectOnGrid(
        _ ticks: [Tick],
        start: TimerInstant,
        period: Duration,
        exact: Bool,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        var previous: Tick?
        for tick in ticks {
            let expected = start.advanced(by: period * Int(tick.sequence))
            #expect(
                tick.scheduled == expected, "tick \(tick.sequence) scheduled off grid", sourceLocation: sourceLocation)
            #expect(tick.fired >= tick.scheduled, "tick fired early: \(tick)", sourceLocation: sourceLocation)
            if let previous {
                #expect(
                    tick.sequence == previous.sequence + UInt64(tick.missed) + 1,
                    "sequence jump: \(previous) → \(tick)", sourceLocation: sourceLocation)
            } else {
                #expect(tick.sequence == UInt64(tick.missed), "first tick: \(tick)", sourceLocation: sourceLocation)
            }
            previous = tick
        }
        if exact {
            #expect(ticks.map(\.sequence) == Array(0..<UInt64(ticks.count)), sourceLocation: sourceLocation)
            #expect(ticks.allSatisfy { $0.missed == 0 && $0.fired == $0.scheduled }, sourceLocation: sourceLocation)
        }
    }
}
