@preconcurrency import Dispatch
import Foundation
import Glibc
import MetronomeTesting
import Testing

@testable import Metronome

/// What must never crash, leak a firing, or deadlock: bad input, `deinit` in every state,
/// and `cancelAndWait` from inside and outside the handler.
@Suite(.serialized, .tags(.realTime))
struct SafeDispatchTimerSafetyTests {
    static let period = Duration.milliseconds(10)

    // MARK: Bad input

    /// Values `schedule(interval:)` must refuse: not finite, not positive, or shorter than a
    /// nanosecond. (A finite span too long for `Int64` nanoseconds saturates instead:
    /// `InputRulesTests`.)
    static let badIntervals: [Double] = [0, -1, -0.0, .nan, .infinity, -.infinity, 1e-10]

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func badIntervalIsRejectedAndDoesNothing(kind: HarnessKind) throws {
        try kind.expectRefusedSchedulesDoNothing(within: Self.period * 3) { harness, recorder in
            Self.badIntervals.flatMap { interval in
                harness.expectRefused("interval \(interval)", recorder: recorder) {
                    $0.schedule(interval: interval, handler: recorder.untimedHandler)
                }
            }
        }
    }

    /// Bad `DispatchTimeInterval`s for `schedule(deadline:repeating:leeway:)`.
    enum BadDispatchArgument: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case negativeRepeating, negativeRepeatingSeconds, zeroRepeating
        case neverLeeway, negativeLeeway

        var testDescription: String { self.rawValue }

        var repeating: DispatchTimeInterval {
            switch self {
            case .negativeRepeating: .nanoseconds(-1)
            case .negativeRepeatingSeconds: .seconds(-1)
            case .zeroRepeating: .nanoseconds(0)
            case .neverLeeway, .negativeLeeway: .milliseconds(10)
            }
        }

        var leeway: DispatchTimeInterval {
            switch self {
            case .neverLeeway: .never
            case .negativeLeeway: .milliseconds(-1)
            case .negativeRepeating, .negativeRepeatingSeconds, .zeroRepeating: .nanoseconds(0)
            }
        }
    }

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func badDispatchArgumentsAreRejectedAndDoNothing(kind: HarnessKind) throws {
        try kind.expectRefusedSchedulesDoNothing(within: Self.period * 3) { harness, recorder in
            var timers: [SafeDispatchTimer] = []
            for bad in BadDispatchArgument.allCases {
                let timer = harness.makeTimer()
                let accepted = timer.schedule(
                    deadline: harness.deadline(after: .milliseconds(1)),
                    repeating: bad.repeating,
                    leeway: bad.leeway,
                    handler: recorder.handler
                )
                #expect(!accepted, "\(bad) accepted")
                #expect(timer.state == .idle, "\(bad) changed the state")
                timers.append(timer)
            }

            // `schedule(at:every:leeway:)`: a period that is not positive, or a deadline on
            // another clock.
            let soon = harness.now.advanced(by: .milliseconds(1))
            let badAt: [(String, TimerInstant, Duration?, Duration)] = [
                ("negative period", soon, .milliseconds(-10), .zero),
                ("zero period", soon, .zero, .zero),
                (
                    "deadline on another clock", TimerInstant(nanoseconds: soon.nanoseconds, clock: .boottime), nil,
                    .zero
                ),
            ]
            for (name, deadline, period, leeway) in badAt {
                let timer = harness.makeTimer()
                #expect(
                    !timer.schedule(at: deadline, every: period, leeway: leeway, handler: recorder.handler),
                    "\(name) accepted")
                #expect(timer.state == .idle, "\(name) changed the state")
                timers.append(timer)
            }
            return timers
        }
    }

    /// A bad `reschedule` on a running timer returns `false` and keeps the old schedule.
    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func badRescheduleKeepsTheOldSchedule(kind: HarnessKind) throws {
        let (harness, recorder, timer) = try kind.makeRecordedTimer()
        defer { harness.tearDown() }
        let deadline = harness.now.advanced(by: Self.period * 3)
        #expect(timer.schedule(deadline: deadline.dispatchTime, handler: recorder.handler))
        for bad: DispatchTimeInterval in [.nanoseconds(-1), .seconds(-5), .nanoseconds(0)] {
            #expect(
                !timer.reschedule(deadline: harness.deadline(after: .milliseconds(1)), repeating: bad),
                "\(bad) accepted")
            #expect(timer.state == .running)
        }
        #expect(harness.wait(for: recorder, count: 1))
        #expect(recorder.ticks.map(\.scheduled) == [deadline], "the old schedule did not survive")
    }

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func leewayLongerThanThePeriodIsClamped(kind: HarnessKind) throws {
        let harness = try kind.make()
        defer { harness.tearDown() }
        let recorder = TickRecorder(harness)
        let dispatchTimer = harness.makeTimer()
        let instantTimer = harness.makeTimer()

        #expect(
            dispatchTimer.schedule(
                deadline: harness.deadline(after: Self.period),
                repeating: .nanoseconds(Int(Self.period.nanoseconds)),
                leeway: .seconds(5),
                handler: recorder.handler
            ),
            "a leeway longer than the period must be clamped, not refused"
        )
        #expect(
            instantTimer.schedule(
                at: harness.now.advanced(by: Self.period),
                every: Self.period,
                leeway: .seconds(5),
                handler: recorder.handler
            )
        )
        // Clamped to one period, six ticks arrive long before a 5 s leeway could pass.
        #expect(harness.wait(for: recorder, count: 6, timeout: .seconds(3)), "only \(recorder.count) ticks")
        dispatchTimer.cancel()
        instantTimer.cancel()
        #expect(recorder.ticks.allSatisfy { $0.fired >= $0.scheduled })
    }

    // MARK: deinit in every state

    enum DeinitCase: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case idleNeverScheduled, idleAfterOneShot, running, suspended, cancelled
        case midHandlerInline, midHandlerOnQueue

        var testDescription: String { self.rawValue }
    }

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.real, DeinitCase.allCases)
    func deinitInEveryState(kind: HarnessKind, situation: DeinitCase) throws {
        let harness = try kind.make()
        defer { harness.tearDown() }
        let recorder = TickRecorder(harness)
        let held = HeldFirstRun(recording: recorder)
        let queue = situation == .midHandlerOnQueue ? markedQueue("metronome.tests.deinit") : nil
        var timer: SafeDispatchTimer? = harness.makeTimer(queue: queue)
        let probe = WeakTimer(timer)
        let repeating = DispatchTimeInterval.nanoseconds(Int(Self.period.nanoseconds))

        switch situation {
        case .idleNeverScheduled:
            break
        case .idleAfterOneShot:
            #expect(
                timer?.schedule(deadline: harness.deadline(after: .milliseconds(1)), handler: recorder.handler) == true)
            #expect(harness.wait(for: recorder, count: 1))
            #expect(timer?.state == .idle)
        case .running:
            #expect(
                timer?.schedule(
                    deadline: harness.deadline(after: .milliseconds(1)), repeating: repeating, handler: recorder.handler
                ) == true)
            #expect(harness.wait(for: recorder, count: 2))
        case .suspended:
            #expect(
                timer?.schedule(
                    deadline: harness.deadline(after: .milliseconds(1)), repeating: repeating, handler: recorder.handler
                ) == true)
            #expect(harness.wait(for: recorder, count: 1))
            #expect(timer?.suspend() == true)
        case .cancelled:
            #expect(
                timer?.schedule(
                    deadline: harness.deadline(after: .milliseconds(1)), repeating: repeating, handler: recorder.handler
                ) == true)
            #expect(harness.wait(for: recorder, count: 1))
            #expect(timer?.cancel() == true)
        case .midHandlerInline, .midHandlerOnQueue:
            let scheduled = timer?.schedule(
                deadline: harness.deadline(after: .milliseconds(1)), repeating: repeating, handler: held.handler)
            #expect(scheduled == true)
            try #require(held.entered.wait(), "the handler never started")
        }

        // Drop the only reference: `deinit` runs here, on this thread.
        timer = nil
        #expect(probe.timer == nil, "the timer outlived its last reference")
        if held.entered.opened {
            held.release.open()
            #expect(held.finished.wait(), "the handler running during deinit never finished")
        }
        if let engine = (harness as? EngineHarness)?.engine {
            #expect(
                harness.eventually { engine.counters.armed == 0 },
                "engine still has \(engine.counters.armed) timers armed after deinit"
            )
        }
        let afterDeinit = recorder.count
        harness.advance(by: Self.period * 5)
        #expect(recorder.count == afterDeinit, "fired \(recorder.count - afterDeinit) times after deinit")
    }

    // MARK: cancelAndWait

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases, [false, true])
    func cancelAndWaitFromItsOwnHandlerReturnsAtOnce(kind: HarnessKind, onQueue: Bool) throws {
        let harness = try kind.make()
        defer { harness.tearDown() }
        let timer = harness.makeTimer(queue: onQueue ? markedQueue("metronome.tests.self-cancel") : nil)
        let weak = WeakTimer(timer)
        let returned = Gate()
        let calls = Locked(0)
        #expect(
            timer.schedule(deadline: harness.deadline(after: .milliseconds(1)), repeating: .milliseconds(5)) { _ in
                calls.withLock { $0 += 1 }
                weak.timer?.cancelAndWait()
                returned.open()
            }
        )
        let didReturn = harness.wait(for: returned)
        if !didReturn {
            harness.abandon()  // the firing thread is stuck; shutting the engine down would hang
        }
        try #require(didReturn, "cancelAndWait from inside its own handler deadlocked")
        #expect(timer.state == .cancelled)
        harness.advance(by: .milliseconds(30))
        #expect(calls.current == 1, "the handler ran again after cancelling itself")
    }

    /// On virtual time handlers nest: one that advances its timeline runs, on its own
    /// stack, the handlers falling due. A nested handler's `cancelAndWait()` of a timer
    /// whose handler runs further up that stack returns at once (waiting would be waiting
    /// for itself), and the outer timer is cancelled. Run on a thread of its own, so a
    /// deadlock fails the test instead of hanging it.
    @Test(.timeLimit(.minutes(1)))
    func cancelAndWaitOfAnOuterHandlerOnTheSameStackReturnsAtOnce() throws {
        let timeline = ManualTimeline()
        let outer = SafeDispatchTimer(backend: .custom(timeline))
        let inner = SafeDispatchTimer(backend: .custom(timeline))
        let returned = Gate()
        #expect(inner.schedule(after: .seconds(2)) { _ in outer.cancelAndWait() })
        #expect(
            outer.schedule(after: .seconds(1), every: .seconds(1)) { _ in
                timeline.advance(by: .seconds(5))
            })
        let thread = try PosixThread.spawn {
            timeline.advance(by: .seconds(1))
            returned.open()
        }
        try #require(returned.wait(timeout: .seconds(10)), "cancelAndWait of an outer handler deadlocked")
        thread.join()
        #expect(outer.state == .cancelled)
        #expect(inner.state == .idle)
    }

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.real, [false, true])
    func cancelAndWaitWaitsForTheRunningHandler(kind: HarnessKind, onQueue: Bool) throws {
        let (harness, recorder, timer) = try kind.makeRecordedTimer(
            queue: onQueue ? markedQueue("metronome.tests.cancel-and-wait") : nil)
        defer { harness.tearDown() }
        let held = HeldFirstRun(recording: recorder)
        let returned = Gate()
        let finishedWhenReturned = Locked<Bool?>(nil)

        #expect(
            timer.schedule(
                deadline: harness.deadline(after: .milliseconds(1)), repeating: .milliseconds(5), handler: held.handler)
        )
        try #require(held.entered.wait(), "the handler never started")

        let started = Gate()
        let waiter = Thread {
            started.open()
            timer.cancelAndWait()
            finishedWhenReturned.withLock { $0 = held.finished.opened }
            returned.open()
        }
        waiter.start()
        try #require(started.wait(), "the waiting thread never started")
        // The cancel part happens at once, before the wait.
        #expect(harness.eventually { timer.state == .cancelled }, "cancelAndWait did not cancel")
        // Bounded: cancelAndWait must still be blocked while the handler is.
        #expect(
            !returned.wait(timeout: .milliseconds(150)), "cancelAndWait returned while its handler was still running")
        held.release.open()
        #expect(returned.wait(), "cancelAndWait never returned after the handler did")
        #expect(finishedWhenReturned.current == true, "cancelAndWait returned before the handler finished")

        let epoch = recorder.bumpEpoch()
        harness.advance(by: .milliseconds(40))
        #expect(recorder.records(since: epoch).isEmpty, "a handler started after cancelAndWait returned")
    }

    /// A handler's captures are released before `cancelAndWait` returns (here the handler
    /// held the last reference to them), while the handler still counts as running: a
    /// capture whose deinit calls `cancelAndWait` on the timer returns at once.
    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.real, [false, true])
    func cancelAndWaitReturnsWithTheHandlersCapturesReleased(kind: HarnessKind, onQueue: Bool) throws {
        let harness = try kind.make()
        defer { harness.tearDown() }
        let timer = harness.makeTimer(queue: onQueue ? markedQueue("metronome.tests.captures-released") : nil)
        let entered = Gate()
        let release = Gate()
        let waitedInDeinit = Gate()
        var owner: CycleOwner? = CycleOwner(
            timer,
            onDeinit: {
                timer.cancelAndWait()
                waitedInDeinit.open()
            })
        let watch = WeakOwner(owner!)
        let scheduled = timer.schedule(deadline: harness.deadline(after: .milliseconds(1)), repeating: .seconds(3600)) {
            [owner] _ in
            withExtendedLifetime(owner) {}
            entered.open()
            release.wait(timeout: .seconds(10))
        }
        #expect(scheduled)
        owner = nil
        try #require(entered.wait(), "the handler never started")

        let returned = Gate()
        let capturesReleasedWhenReturned = Locked<Bool?>(nil)
        let waiter = Thread {
            timer.cancelAndWait()
            capturesReleasedWhenReturned.withLock { $0 = watch.owner == nil }
            returned.open()
        }
        waiter.start()
        #expect(harness.eventually { timer.state == .cancelled }, "cancelAndWait did not cancel")
        release.open()
        #expect(returned.wait(), "cancelAndWait never returned after the handler did")
        #expect(capturesReleasedWhenReturned.current == true, "cancelAndWait returned before the captures went")
        #expect(waitedInDeinit.opened, "a capture's deinit waited for its own handler")
    }
}
