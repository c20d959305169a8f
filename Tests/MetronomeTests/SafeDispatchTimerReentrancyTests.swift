@preconcurrency import Dispatch
import Foundation
import Glibc
import MetronomeTesting
import Testing

@testable import Metronome

/// Owns its timer, whose handler captures it strongly: a cycle that only the timer's
/// letting go of the handler breaks. Counts its own deinit through `watch`.
final class CycleOwner: Sendable {
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

final class WeakOwner: @unchecked Sendable {
    private let lock = NSLock()
    private weak var stored: CycleOwner?

    init(_ owner: CycleOwner) {
        self.stored = owner
    }

    var owner: CycleOwner? { self.lock.withLock { self.stored } }
}

/// Handlers that act on their own timer (cancel, reschedule or drop it, or wait for it), and
/// handlers on queues: nothing crashes, deadlocks or overlaps.
@Suite(.serialized, .tags(.realTime))
struct SafeDispatchTimerReentrancyTests {
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
        // The handler records through the owner, so the tick shows it was held until the
        // firing (on the engine, a check here would race a firing a millisecond away).
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

        engine.syncShutdown()
        #expect(timers.map(\.state) == [.cancelled, .cancelled, .cancelled, .cancelled, .suspended])
        let freed = watches.map { $0.owner == nil }
        #expect(freed == [true, true, true, true, false], "owners freed by the shutdown: \(freed)")
        #expect(!timers[4].resume(), "a suspended timer resumed on a stopped engine")
        #expect(timers[4].state == .cancelled)
        #expect(watches[4].owner == nil, "a refused resume kept the handler")
    }

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func handlerCancelsItsOwnTimer(kind: HarnessKind) throws {
        let (harness, recorder, timer) = try kind.makeRecordedTimer()
        defer { harness.tearDown() }
        let weak = WeakTimer(timer)
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
        let (harness, recorder, timer) = try kind.makeRecordedTimer()
        defer { harness.tearDown() }
        let weak = WeakTimer(timer)
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
        let (harness, recorder, timer) = try kind.makeRecordedTimer()
        defer { harness.tearDown() }
        let weak = WeakTimer(timer)
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
}
