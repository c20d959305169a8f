@preconcurrency import Dispatch
import Foundation
import Glibc
import MetronomeTesting
import Testing

@testable import Metronome

/// What must never crash, leak a firing, or deadlock: bad input, `deinit` in every state,
/// `cancelAndWait` from inside and outside the handler, handlers that cancel, reschedule or
/// drop their own timer, engine shutdown and engine configuration errors.
@Suite(.serialized, .tags(.realTime))
struct SafeDispatchTimerSafetyTests {
    static let period = Duration.milliseconds(10)

    // MARK: Bad input

    /// Values `schedule(interval:)` must refuse: not finite, not positive, shorter than a
    /// nanosecond, or too long for `Int64` nanoseconds.
    static let badIntervals: [Double] = [0, -1, -0.0, .nan, .infinity, -.infinity, 1e300, 1e-10]

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func badIntervalIsRejectedAndDoesNothing(kind: HarnessKind) throws {
        let harness = try kind.make()
        defer { harness.tearDown() }
        let recorder = TickRecorder(harness)
        var timers: [SafeDispatchTimer] = []
        for interval in Self.badIntervals {
            let idle = harness.makeTimer()
            #expect(
                !idle.schedule(interval: interval, handler: recorder.untimedHandler), "interval \(interval) accepted")
            #expect(idle.state == .idle, "interval \(interval) changed the state")

            let cancelled = harness.makeTimer()
            #expect(cancelled.schedule(deadline: harness.deadline(after: .seconds(3600)), handler: recorder.handler))
            #expect(cancelled.cancel())
            #expect(
                !cancelled.schedule(interval: interval, handler: recorder.untimedHandler),
                "interval \(interval) accepted")
            #expect(cancelled.state == .cancelled)
            timers += [idle, cancelled]
        }
        if let armed = harness.armedCount { #expect(armed == 0, "a rejected schedule armed something") }
        harness.advance(by: Self.period * 3)
        #expect(recorder.count == 0, "a rejected schedule fired")
    }

    /// Bad `DispatchTimeInterval`s for `schedule(deadline:repeating:leeway:)`.
    enum BadDispatchArgument: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case negativeRepeating, negativeRepeatingSeconds, zeroRepeating, overflowingRepeating
        case neverLeeway, negativeLeeway, overflowingLeeway

        var testDescription: String { self.rawValue }

        var repeating: DispatchTimeInterval {
            switch self {
            case .negativeRepeating: .nanoseconds(-1)
            case .negativeRepeatingSeconds: .seconds(-1)
            case .zeroRepeating: .nanoseconds(0)
            case .overflowingRepeating: .seconds(Int.max)
            case .neverLeeway, .negativeLeeway, .overflowingLeeway: .milliseconds(10)
            }
        }

        var leeway: DispatchTimeInterval {
            switch self {
            case .neverLeeway: .never
            case .negativeLeeway: .milliseconds(-1)
            case .overflowingLeeway: .seconds(Int.max)
            case .negativeRepeating, .negativeRepeatingSeconds, .zeroRepeating, .overflowingRepeating: .nanoseconds(0)
            }
        }
    }

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func badDispatchArgumentsAreRejectedAndDoNothing(kind: HarnessKind) throws {
        let harness = try kind.make()
        defer { harness.tearDown() }
        let recorder = TickRecorder(harness)
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

        // `schedule(at:every:leeway:)`: a period that is not positive, a negative leeway, a
        // negative deadline, or a period or leeway past `Int64` nanoseconds.
        let soon = harness.now.advanced(by: .milliseconds(1))
        let badAt: [(String, TimerInstant, Duration?, Duration)] = [
            ("negative period", soon, .milliseconds(-10), .zero),
            ("zero period", soon, .zero, .zero),
            ("negative leeway", soon, .milliseconds(10), .milliseconds(-1)),
            ("negative deadline", TimerInstant(nanoseconds: -1), nil, .zero),
            ("period past Int64 nanoseconds", soon, .seconds(Int64.max), .zero),
            ("leeway past Int64 nanoseconds", soon, .milliseconds(10), .seconds(Int64.max)),
            ("one-shot leeway past Int64 nanoseconds", TimerInstant(nanoseconds: 0), nil, .seconds(Int64.max)),
        ]
        for (name, deadline, period, leeway) in badAt {
            let timer = harness.makeTimer()
            #expect(
                !timer.schedule(at: deadline, every: period, leeway: leeway, handler: recorder.handler),
                "\(name) accepted")
            #expect(timer.state == .idle, "\(name) changed the state")
            timers.append(timer)
        }
        if let armed = harness.armedCount { #expect(armed == 0) }
        harness.advance(by: Self.period * 3)
        #expect(recorder.count == 0, "a rejected schedule fired")
    }

    /// A bad `reschedule` on a running timer returns `false` and keeps the old schedule.
    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func badRescheduleKeepsTheOldSchedule(kind: HarnessKind) throws {
        let harness = try kind.make()
        defer { harness.tearDown() }
        let recorder = TickRecorder(harness)
        let timer = harness.makeTimer()
        let deadline = harness.now.advanced(by: Self.period * 3)
        #expect(timer.schedule(deadline: deadline.dispatchTime, handler: recorder.handler))
        for bad: DispatchTimeInterval in [.nanoseconds(-1), .seconds(-5), .nanoseconds(0), .seconds(Int.max)] {
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
        let entered = Gate()
        let release = Gate()
        let finished = Gate()
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
            let scheduled = timer?.schedule(deadline: harness.deadline(after: .milliseconds(1)), repeating: repeating) {
                tick in
                recorder.record(tick)
                if !entered.opened {
                    entered.open()
                    release.wait(timeout: .seconds(10))
                    finished.open()
                }
            }
            #expect(scheduled == true)
            try #require(entered.wait(), "the handler never started")
        }

        // Drop the only reference: `deinit` runs here, on this thread.
        timer = nil
        #expect(probe.timer == nil, "the timer outlived its last reference")
        if entered.opened {
            release.open()
            #expect(finished.wait(), "the handler running during deinit never finished")
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
        let harness = try kind.make()
        defer { harness.tearDown() }
        let timer = harness.makeTimer(queue: onQueue ? markedQueue("metronome.tests.cancel-and-wait") : nil)
        let recorder = TickRecorder(harness)
        let entered = Gate()
        let release = Gate()
        let handlerFinished = Gate()
        let returned = Gate()
        let finishedWhenReturned = Locked<Bool?>(nil)

        #expect(
            timer.schedule(deadline: harness.deadline(after: .milliseconds(1)), repeating: .milliseconds(5)) { tick in
                recorder.record(tick)
                if !entered.opened {
                    entered.open()
                    release.wait(timeout: .seconds(10))
                    handlerFinished.open()
                }
            }
        )
        try #require(entered.wait(), "the handler never started")

        let started = Gate()
        let waiter = Thread {
            started.open()
            timer.cancelAndWait()
            finishedWhenReturned.withLock { $0 = handlerFinished.opened }
            returned.open()
        }
        waiter.start()
        try #require(started.wait(), "the waiting thread never started")
        // The cancel part happens at once, before the wait.
        #expect(harness.eventually { timer.state == .cancelled }, "cancelAndWait did not cancel")
        // Bounded: cancelAndWait must still be blocked while the handler is.
        #expect(
            !returned.wait(timeout: .milliseconds(150)), "cancelAndWait returned while its handler was still running")
        release.open()
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

    // MARK: Handlers that act on their own timer

    /// Owns its timer, whose handler captures it strongly: a cycle that only the timer's
    /// letting go of the handler breaks. Counts its own deinit through `watch`.
    private final class CycleOwner: Sendable {
        let timer: SafeDispatchTimer
        let recorder: TickRecorder?
        let onDeinit: @Sendable () -> Void

        init(_ timer: SafeDispatchTimer, recorder: TickRecorder? = nil, onDeinit: @escaping @Sendable () -> Void = {}) {
            self.timer = timer
            self.recorder = recorder
            self.onDeinit = onDeinit
        }

        deinit {
            self.onDeinit()
        }

        func start(after deadline: DispatchTime, repeating: DispatchTimeInterval = .never) {
            let scheduled = self.timer.schedule(deadline: deadline, repeating: repeating) { tick in
                self.recorder?.record(tick)
            }
            precondition(scheduled, "an idle timer refused a schedule")
        }
    }

    private final class WeakOwner: @unchecked Sendable {
        private let lock = NSLock()
        private weak var stored: CycleOwner?

        init(_ owner: CycleOwner) {
            self.stored = owner
        }

        var owner: CycleOwner? { self.lock.withLock { self.stored } }
    }

    /// Cancels a timer from its deinit, as an owner that keeps a timer commonly does.
    private final class CancelsOnDeinit: Sendable {
        let timer: SafeDispatchTimer
        let cancelled: Locked<Bool?>

        init(_ timer: SafeDispatchTimer, cancelled: Locked<Bool?>) {
            self.timer = timer
            self.cancelled = cancelled
        }

        deinit {
            let cancelled = self.timer.cancel()
            self.cancelled.withLock { $0 = cancelled }
        }
    }

    /// A cancel releases the handler, outside the timer's lock, so a capture whose deinit
    /// calls back into the timer (an owner cancelling it in deinit) does not deadlock on it.
    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func aReleasedHandlersCapturesMayCallBackIntoTheTimer(kind: HarnessKind) throws {
        let harness = try kind.make()
        defer { harness.tearDown() }
        let timer = harness.makeTimer()
        let cancelled = Locked<Bool?>(nil)
        do {
            let owner = CancelsOnDeinit(timer, cancelled: cancelled)
            let scheduled = timer.schedule(deadline: harness.deadline(after: .seconds(3600))) { _ in
                withExtendedLifetime(owner) {}
            }
            #expect(scheduled)
        }
        #expect(cancelled.current == nil, "the running timer's handler let go of its capture")
        #expect(timer.cancel())
        // The handler held the last reference to `owner`, whose deinit found the timer
        // already cancelled.
        #expect(cancelled.current == false)
        #expect(timer.state == .cancelled)
        #expect(timer.schedule(deadline: harness.deadline(after: .seconds(3600))) { _ in })
        #expect(timer.state == .running)
    }

    /// The handler is the timer's only while the timer can still run it: a handler that
    /// captures the timer's owner strongly keeps it alive only until the timer is cancelled
    /// or its one-shot has fired, as GCD releases a cancelled source's handler. A suspended
    /// timer keeps its handler for `resume()`.
    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func aTimerLetsGoOfItsHandlerOnceItCannotRunIt(kind: HarnessKind) throws {
        let harness = try kind.make()
        defer { harness.tearDown() }

        // Cancelled, from running and from suspended.
        for suspendFirst in [false, true] {
            var owner: CycleOwner? = CycleOwner(harness.makeTimer())
            let watch = WeakOwner(owner!)
            owner!.start(after: harness.deadline(after: .seconds(3600)))
            if suspendFirst { #expect(owner!.timer.suspend()) }
            let timer = owner!.timer
            owner = nil
            #expect(watch.owner != nil, "a \(timer.state) timer let go of its handler")
            #expect(timer.cancel())
            let from = suspendFirst ? "suspended" : "running"
            #expect(watch.owner == nil, "a timer cancelled while \(from) kept its handler")
        }
        // A one-shot that fired: released once the handler has returned.
        let recorder = TickRecorder(harness)
        var owner: CycleOwner? = CycleOwner(harness.makeTimer(), recorder: recorder)
        let watch = WeakOwner(owner!)
        owner!.start(after: harness.deadline(after: .milliseconds(1)))
        owner = nil
        #expect(watch.owner != nil, "a running timer let go of its handler")
        harness.advance(by: .milliseconds(5))
        #expect(harness.wait(for: recorder, count: 1))
        #expect(harness.eventually { watch.owner == nil }, "a fired one-shot kept its handler")
    }

    /// A running timer whose engine shuts down can never fire again: it is cancelled and
    /// lets go of its handler, so an owner its handler holds is freed by the shutdown —
    /// one-shot, repeating, pushed later (keeping its arming), or moved earlier to an arming
    /// of a new id. A suspended timer holds no arming: it keeps its handler until its
    /// resume is refused.
    @Test(.timeLimit(.minutes(1)))
    func aShutdownCancelsRunningTimersAndLetsGoOfTheirHandlers() throws {
        let engine = try TimerEngine()
        let far = DispatchTime.now() + .seconds(3600)
        var owners: [CycleOwner]? = (0..<5).map { _ in CycleOwner(SafeDispatchTimer(backend: .engine(engine))) }
        owners![0].start(after: far)
        owners![1].start(after: far, repeating: .seconds(1))
        owners![2].start(after: far)
        #expect(owners![2].timer.reschedule(deadline: far + .seconds(1), repeating: .never))
        owners![3].start(after: far)
        #expect(owners![3].timer.reschedule(deadline: far - .seconds(1), repeating: .never))
        owners![4].start(after: far)
        #expect(owners![4].timer.suspend())
        let watches = owners!.map(WeakOwner.init)
        let timers = owners!.map(\.timer)
        owners = nil
        #expect(watches.allSatisfy { $0.owner != nil }, "a scheduled timer let go of its handler")

        engine.shutdown()
        #expect(timers.map(\.state) == [.cancelled, .cancelled, .cancelled, .cancelled, .suspended])
        let freed = watches.map { $0.owner == nil }
        #expect(freed == [true, true, true, true, false], "owners freed by the shutdown: \(freed)")
        #expect(!timers[4].resume(), "a suspended timer resumed on a stopped engine")
        #expect(timers[4].state == .cancelled)
        #expect(watches[4].owner == nil, "a refused resume kept the handler")
    }

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func handlerCancelsItsOwnTimer(kind: HarnessKind) throws {
        let harness = try kind.make()
        defer { harness.tearDown() }
        let timer = harness.makeTimer()
        let weak = WeakTimer(timer)
        let recorder = TickRecorder(harness)
        let result = Locked<Bool?>(nil)
        #expect(
            timer.schedule(deadline: harness.deadline(after: .milliseconds(1)), repeating: .milliseconds(5)) { tick in
                recorder.record(tick)
                let cancelled = weak.timer?.cancel()
                result.withLock { $0 = $0 ?? cancelled }
            }
        )
        #expect(harness.wait(for: recorder, count: 1))
        harness.advance(by: .milliseconds(30))
        #expect(result.current == true, "cancel from the handler returned \(String(describing: result.current))")
        #expect(recorder.count == 1, "fired \(recorder.count) times after cancelling itself")
        #expect(timer.state == .cancelled)
    }

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func handlerReschedulesItsOwnTimer(kind: HarnessKind) throws {
        let harness = try kind.make()
        defer { harness.tearDown() }
        let timer = harness.makeTimer()
        let weak = WeakTimer(timer)
        let recorder = TickRecorder(harness)
        let moved = Locked<(accepted: Bool, deadline: TimerInstant)?>(nil)
        #expect(
            timer.schedule(deadline: harness.deadline(after: .milliseconds(1)), repeating: .milliseconds(5)) { tick in
                recorder.record(tick)
                guard moved.current == nil else { return }
                // From repeating every 5 ms to a single firing 20 ms out.
                let deadline = harness.handlerClock().advanced(by: .milliseconds(20))
                let accepted = weak.timer?.reschedule(deadline: deadline.dispatchTime) ?? false
                moved.withLock { $0 = (accepted, deadline) }
            }
        )
        #expect(harness.wait(for: recorder, count: 2))
        harness.advance(by: .milliseconds(40))
        let ticks = recorder.ticks
        let move = try #require(moved.current)
        #expect(move.accepted, "reschedule from the handler was refused")
        #expect(ticks.count == 2, "expected the first tick and the moved one, got \(ticks)")
        #expect(ticks.last?.scheduled == move.deadline)
        #expect(timer.state == .idle, "the moved schedule was a one-shot")
    }

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func oneShotHandlerSchedulesItsTimerAgain(kind: HarnessKind) throws {
        let harness = try kind.make()
        defer { harness.tearDown() }
        let timer = harness.makeTimer()
        let weak = WeakTimer(timer)
        let recorder = TickRecorder(harness)
        let results = Locked<[Bool]>([])
        let handler = Locked<(@Sendable (Tick) -> Void)?>(nil)
        let body: @Sendable (Tick) -> Void = { tick in
            recorder.record(tick)
            guard recorder.count < 3, let again = handler.current, let timer = weak.timer else { return }
            // A fired one-shot is idle: `schedule` (not `reschedule`) starts it again.
            let rescheduleRefused = !timer.reschedule(deadline: harness.deadline(after: .milliseconds(5)))
            let accepted = timer.schedule(deadline: harness.deadline(after: .milliseconds(5)), handler: again)
            results.withLock { $0.append(rescheduleRefused && accepted) }
        }
        handler.withLock { $0 = body }
        #expect(timer.schedule(deadline: harness.deadline(after: .milliseconds(1)), handler: body))
        #expect(harness.wait(for: recorder, count: 3))
        harness.advance(by: .milliseconds(20))
        #expect(recorder.count == 3)
        #expect(results.current == [true, true])
        #expect(timer.state == .idle)
        handler.withLock { $0 = nil }
    }

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases, [false, true])
    func handlerDropsTheLastReferenceToItsTimer(kind: HarnessKind, onQueue: Bool) throws {
        let harness = try kind.make()
        defer { harness.tearDown() }
        let holder = TimerHolder(harness.makeTimer(queue: onQueue ? markedQueue("metronome.tests.drop") : nil))
        let probe = WeakTimer(holder.timer)
        let recorder = TickRecorder(harness)
        let dropped = Gate()
        let scheduled = holder.timer?.schedule(
            deadline: harness.deadline(after: .milliseconds(1)), repeating: .milliseconds(5)
        ) { tick in
            recorder.record(tick)
            holder.drop()  // deinit runs here, inside the timer's own handler
            dropped.open()
        }
        #expect(scheduled == true)
        #expect(harness.wait(for: dropped))
        harness.advance(by: .milliseconds(40))
        #expect(probe.timer == nil, "the timer outlived its last reference")
        #expect(recorder.count == 1, "fired \(recorder.count) times; the dropped timer kept firing")
        if let armed = harness.armedCount { #expect(armed == 0) }
    }

    // MARK: Queues

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.real)
    func handlerRunsOnTheGivenQueue(kind: HarnessKind) throws {
        let harness = try kind.make()
        defer { harness.tearDown() }
        let queue = markedQueue("metronome.tests.queue")
        let onQueue = harness.makeTimer(queue: queue)
        let inline = harness.makeTimer()
        let queued = TickRecorder(harness)
        let unqueued = TickRecorder(harness)
        #expect(
            onQueue.schedule(
                deadline: harness.deadline(after: .milliseconds(1)), repeating: .milliseconds(3),
                handler: queued.handler))
        #expect(
            inline.schedule(
                deadline: harness.deadline(after: .milliseconds(1)), repeating: .milliseconds(3),
                handler: unqueued.handler))
        #expect(harness.wait(for: queued, count: 3))
        #expect(harness.wait(for: unqueued, count: 3))
        onQueue.cancelAndWait()
        inline.cancelAndWait()
        #expect(queued.all.allSatisfy { $0.onMarkedQueue }, "a handler ran off its queue")
        #expect(!unqueued.all.contains { $0.onMarkedQueue })
    }

    /// One timer's handler invocations never overlap, even across a suspend/resume (or a
    /// reschedule) made while a handler is still running: the point of a serial
    /// queue, and what `init(queue: nil)` promises ("with `.dispatch`, on a private serial
    /// queue").
    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.real, [false, true])
    func handlersOfOneTimerNeverOverlap(kind: HarnessKind, onQueue: Bool) throws {
        let harness = try kind.make()
        defer { harness.tearDown() }
        let timer = harness.makeTimer(queue: onQueue ? markedQueue("metronome.tests.overlap") : nil)
        let active = Locked(0)
        let overlaps = Locked(0)
        let calls = Locked(0)
        let entered = Gate()
        let release = Gate()
        #expect(
            timer.schedule(deadline: harness.deadline(after: .milliseconds(1)), repeating: .milliseconds(5)) { _ in
                let concurrent = active.withLock {
                    $0 += 1
                    return $0
                }
                if concurrent > 1 { overlaps.withLock { $0 += 1 } }
                calls.withLock { $0 += 1 }
                if !entered.opened {
                    entered.open()
                    release.wait(timeout: .seconds(2))
                }
                active.withLock { $0 -= 1 }
            }
        )
        try #require(entered.wait(), "the handler never started")
        // While the first invocation is still running, start a new arming.
        #expect(timer.suspend())
        #expect(timer.resume())
        harness.advance(by: .milliseconds(60))  // bounded: checking that nothing overlaps
        release.open()
        harness.advance(by: .milliseconds(20))
        timer.cancelAndWait()
        #expect(overlaps.current == 0, "\(overlaps.current) of \(calls.current) handler calls overlapped a running one")
    }

    // MARK: Engine shutdown and configuration

    @Test(.timeLimit(.minutes(1)), arguments: [false, true])
    func shutDownEngineStopsTimersAndRefusesNewOnes(onQueue: Bool) throws {
        let harness = try EngineHarness()
        defer { harness.tearDown() }
        let engine = harness.engine
        let recorder = TickRecorder(harness)
        let armedBefore = harness.makeTimer(queue: onQueue ? markedQueue("metronome.tests.shutdown") : nil)
        #expect(
            armedBefore.schedule(
                deadline: harness.deadline(after: .milliseconds(1)), repeating: .milliseconds(5),
                handler: recorder.handler))
        #expect(harness.wait(for: recorder, count: 2))

        engine.shutdown()
        let epoch = recorder.bumpEpoch()
        engine.shutdown()  // idempotent
        #expect(engine.counters.armed == 0)
        harness.advance(by: .milliseconds(40))
        // Inline handlers: shutdown waited for the running one, so none starts later. On a
        // queue, one delivery already queued may still run.
        #expect(recorder.records(since: epoch).count <= (onQueue ? 1 : 0), "fired after the engine shut down")

        let later = harness.makeTimer()
        #expect(!later.schedule(deadline: harness.deadline(after: .milliseconds(1)), handler: recorder.handler))
        #expect(later.state == .idle, "a refused schedule does nothing")
        #expect(!later.schedule(interval: 0.001, handler: recorder.untimedHandler))
        #expect(later.state == .idle)

        // The timer armed before the shutdown was cancelled by it, and is still safe to use.
        #expect(armedBefore.state == .cancelled)
        #expect(!armedBefore.suspend())
        #expect(!armedBefore.resume())
        #expect(!armedBefore.cancel())
        #expect(!armedBefore.schedule(deadline: harness.deadline(after: .milliseconds(1)), handler: recorder.handler))
        #expect(armedBefore.state == .cancelled)
        armedBefore.cancelAndWait()
        harness.advance(by: .milliseconds(10))
        #expect(recorder.records(since: epoch).count <= (onQueue ? 1 : 0))
    }

    static let badConfigurations: [(String, TimerEngine.Configuration)] = [
        ("realtimePriority 0", .init(realtimePriority: 0)),
        ("realtimePriority 100", .init(realtimePriority: 100)),
        ("realtimePriority -1", .init(realtimePriority: -1)),
        ("cpu 100000", .init(cpu: 100_000)),
        ("cpu -2", .init(cpu: -2)),
        ("negative spinWindow", .init(spinWindow: .milliseconds(-1))),
        ("negative lateThreshold", .init(lateThreshold: .milliseconds(-1))),
    ]

    @Test(.timeLimit(.minutes(1)), arguments: Self.badConfigurations.indices)
    func badEngineConfigurationThrowsEINVAL(index: Int) {
        let (name, configuration) = Self.badConfigurations[index]
        do {
            let engine = try TimerEngine(configuration: configuration)
            engine.shutdown()
            Issue.record("\(name): the engine started")
        } catch {
            #expect(error.code == EINVAL, "\(name): \(error)")
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func realtimePriorityIsGrantedOrItsRefusalReported() throws {
        let harness = try EngineHarness(configuration: .init(realtimePriority: 10))
        defer { harness.tearDown() }
        let report = harness.engine.threadReport
        print(
            "realtimePriority 10: granted \(String(describing: report.realtimePriority)), refusal \(String(describing: report.realtimeRefusal))"
        )
        if let priority = report.realtimePriority {
            #expect(priority == 10)
            #expect(report.realtimeRefusal == nil)
        } else {
            let refusal = try #require(report.realtimeRefusal, "neither granted nor refused: \(report)")
            #expect(refusal.code != 0)
        }
        // Either way the engine fires.
        let recorder = TickRecorder(harness)
        let timer = harness.makeTimer()
        #expect(timer.schedule(deadline: harness.deadline(after: .milliseconds(1)), handler: recorder.handler))
        #expect(harness.wait(for: recorder, count: 1))
    }
}
