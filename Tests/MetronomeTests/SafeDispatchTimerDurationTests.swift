@preconcurrency import Dispatch
import Foundation
import MetronomeTesting
import Testing

@testable import Metronome

/// The `Duration` forms of `schedule` and `reschedule`, and `cancelAndAwaitHandlers()`, on
/// virtual time, the engine and GCD. Every call in every state is in
/// `SafeDispatchTimerBehaviourTests.everyCallInEveryStateMatchesTheTable`.
@Suite(.serialized, .tags(.realTime))
struct SafeDispatchTimerDurationTests {
    static let period = Duration.milliseconds(20)

    // MARK: schedule(after:every:leeway:)

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func scheduleAfterFollowsItsGrid(kind: HarnessKind) throws {
        let (harness, recorder, timer) = try kind.makeRecordedTimer()
        defer { harness.tearDown() }
        let before = harness.now

        #expect(timer.schedule(after: Self.period, every: Self.period * 2, handler: recorder.handler))
        let after = harness.now
        #expect(harness.wait(for: recorder, count: 3))
        #expect(timer.cancel())
        let ticks = Array(recorder.ticks.prefix(3))
        try #require(ticks.count == 3)
        let first = ticks[0].scheduled.advanced(by: .zero - Self.period * 2 * Int(ticks[0].sequence))
        #expect(first >= before.advanced(by: Self.period))
        #expect(first <= after.advanced(by: Self.period))
        SafeDispatchTimerBehaviourTests.expectOnGrid(
            ticks, start: first, period: Self.period * 2, exact: harness.isVirtual)
    }

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func scheduleAfterZeroFiresOnceAtOnce(kind: HarnessKind) throws {
        let (harness, recorder, timer) = try kind.makeRecordedTimer()
        defer { harness.tearDown() }
        let before = harness.now

        #expect(timer.schedule(after: .zero, handler: recorder.handler))
        #expect(harness.wait(for: recorder, count: 1))
        harness.advance(by: Self.period * 3)
        #expect(recorder.count == 1)
        #expect(timer.state == .idle)
        #expect(recorder.ticks[0].scheduled >= before)
    }

    // MARK: reschedule(after:every:) and reschedule(at:every:)

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func rescheduleAfterMovesTheScheduleAndKeepsTheHandler(kind: HarnessKind) throws {
        let (harness, recorder, timer) = try kind.makeRecordedTimer()
        defer { harness.tearDown() }

        #expect(timer.schedule(after: .seconds(3600), handler: recorder.handler))
        let before = harness.now
        #expect(timer.reschedule(after: Self.period, every: Self.period))
        #expect(harness.wait(for: recorder, count: 2))
        #expect(timer.cancel())
        let ticks = recorder.ticks
        let first = ticks[0].scheduled.advanced(by: .zero - Self.period * Int(ticks[0].sequence))
        #expect(first >= before.advanced(by: Self.period))
        SafeDispatchTimerBehaviourTests.expectOnGrid(
            Array(ticks.prefix(2)), start: first, period: Self.period, exact: harness.isVirtual)
    }

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func rescheduleAtMovesTheScheduleToTheInstant(kind: HarnessKind) throws {
        let (harness, recorder, timer) = try kind.makeRecordedTimer()
        defer { harness.tearDown() }
        let start = harness.now.advanced(by: Self.period)

        #expect(timer.schedule(after: .seconds(3600), every: .seconds(3600), handler: recorder.handler))
        #expect(timer.reschedule(at: start, every: Self.period * 2))
        #expect(harness.wait(for: recorder, count: 2))
        #expect(timer.cancel())
        SafeDispatchTimerBehaviourTests.expectOnGrid(
            Array(recorder.ticks.prefix(2)), start: start, period: Self.period * 2, exact: harness.isVirtual)
    }

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func rescheduleOfASuspendedTimerTakesEffectOnResume(kind: HarnessKind) throws {
        let (harness, recorder, timer) = try kind.makeRecordedTimer()
        defer { harness.tearDown() }

        #expect(timer.schedule(after: .seconds(3600), handler: recorder.handler))
        #expect(timer.suspend())
        let deadline = harness.now.advanced(by: Self.period)
        #expect(timer.reschedule(at: deadline))
        #expect(timer.state == .suspended)
        harness.advance(by: Self.period * 2)
        #expect(recorder.count == 0, "a suspended timer fired")
        #expect(timer.resume())
        #expect(harness.wait(for: recorder, count: 1))
        #expect(recorder.ticks.map(\.scheduled) == [deadline], "a passed one-shot deadline fires on resume")
    }

    /// Every reschedule keeps the leeway the timer was scheduled with; the backend is what
    /// sees it.
    @Test(.timeLimit(.minutes(1)))
    func rescheduleKeepsTheLeeway() {
        let backend = RecordingBackend()
        let timer = SafeDispatchTimer(backend: .custom(backend))
        let leeway = Duration.milliseconds(3)

        #expect(timer.schedule(after: .seconds(10), every: .seconds(1), leeway: leeway) { _ in })
        #expect(timer.reschedule(after: .seconds(5)))
        #expect(timer.reschedule(at: backend.timeline.now.advanced(by: .seconds(7)), every: .seconds(2)))
        #expect(timer.reschedule(deadline: DispatchTime(uptimeNanoseconds: 9_000_000_000)))
        let armed = backend.armed
        #expect(armed.count == 4)
        #expect(armed.allSatisfy { $0.leewayNanoseconds == leeway.nanoseconds })
        #expect(armed.map(\.deadlineNanoseconds) == [10, 5, 7, 9].map { Duration.seconds($0).nanoseconds })
        #expect(
            armed.map(\.periodNanoseconds) == [
                Duration.seconds(1).nanoseconds, nil, Duration.seconds(2).nanoseconds, nil,
            ])
    }

    // MARK: Bad input

    /// `(delay, period, leeway)` triples `schedule(after:every:leeway:)` must refuse: only
    /// periods under a nanosecond (the values the rules accept are in `InputRulesTests`).
    static let badSchedules: [(String, Duration, Duration?, Duration)] = [
        ("negative period", .milliseconds(1), .milliseconds(-1), .zero),
        ("zero period", .milliseconds(1), .zero, .zero),
        ("sub-nanosecond period", .milliseconds(1), .nanoseconds(1) / 2, .zero),
    ]

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func badDurationsAreRejectedAndDoNothing(kind: HarnessKind) throws {
        try kind.expectRefusedSchedulesDoNothing(within: Self.period * 3) { harness, recorder in
            Self.badSchedules.flatMap { name, delay, period, leeway in
                harness.expectRefused(name, recorder: recorder) {
                    $0.schedule(after: delay, every: period, leeway: leeway, handler: recorder.handler)
                }
            }
        }
    }

    /// `(delay, period)` pairs `reschedule(after:every:)` must refuse, and `(deadline,
    /// period)` pairs for `reschedule(at:every:)`.
    static let badReschedulesAfter: [(String, Duration, Duration?)] = [
        ("zero period", .milliseconds(1), .zero),
        ("negative period", .milliseconds(1), .seconds(-1)),
    ]
    static let badReschedulesAt: [(String, TimerInstant, Duration?)] = [
        ("zero period", TimerInstant(nanoseconds: 1), .zero),
        ("deadline on another clock", TimerInstant(nanoseconds: 1, clock: .wall), nil),
    ]

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases)
    func badRescheduleKeepsTheOldSchedule(kind: HarnessKind) throws {
        let (harness, recorder, timer) = try kind.makeRecordedTimer()
        defer { harness.tearDown() }
        let deadline = harness.now.advanced(by: Self.period * 3)
        #expect(timer.schedule(at: deadline, leeway: .milliseconds(1), handler: recorder.handler))
        for (name, delay, period) in Self.badReschedulesAfter {
            #expect(!timer.reschedule(after: delay, every: period), "\(name) accepted")
            #expect(timer.state == .running)
        }
        for (name, instant, period) in Self.badReschedulesAt {
            #expect(!timer.reschedule(at: instant, every: period), "\(name) accepted")
            #expect(timer.state == .running)
        }
        #expect(harness.wait(for: recorder, count: 1))
        #expect(recorder.ticks.map(\.scheduled) == [deadline], "the old schedule did not survive")
    }

    // MARK: cancelAndAwaitHandlers()

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.real, [false, true])
    func cancelAndAwaitHandlersWaitsForTheRunningHandler(kind: HarnessKind, onQueue: Bool) async throws {
        let (harness, recorder, timer) = try kind.makeRecordedTimer(
            queue: onQueue ? markedQueue("metronome.tests.await-handlers") : nil)
        defer { harness.tearDown() }
        let held = HeldFirstRun(recording: recorder)

        #expect(timer.schedule(after: .milliseconds(1), every: .milliseconds(5), handler: held.handler))
        try #require(await poll { held.entered.opened }, "the handler never started")

        let returned = Gate()
        let waiter = Task {
            await timer.cancelAndAwaitHandlers()
            returned.open()
            return held.finished.opened
        }
        #expect(await poll { timer.state == .cancelled }, "cancelAndAwaitHandlers did not cancel")
        // Bounded: the task must still be suspended while the handler runs.
        #expect(
            !(await poll(timeout: .milliseconds(150)) { returned.opened }),
            "returned while its handler was still running")
        held.release.open()
        #expect(await waiter.value, "returned before the handler finished")

        let epoch = recorder.bumpEpoch()
        harness.advance(by: .milliseconds(40))
        #expect(recorder.records(since: epoch).isEmpty, "a handler started after cancelAndAwaitHandlers returned")
    }

    /// More waiters than the cooperative pool has threads, and the handler finishes only
    /// when a task opens its gate after every waiter has started: a wait that blocked its
    /// thread would leave that task no thread to run on.
    @Test(.timeLimit(.minutes(1)))
    func cancelAndAwaitHandlersSuspendsInsteadOfBlockingAThread() async throws {
        let harness = try EngineHarness()
        defer { harness.tearDown() }
        let timer = harness.makeTimer()
        let entered = Gate()
        let release = Gate()
        let releasedByTheTask = Locked<Bool?>(nil)
        #expect(
            timer.schedule(after: .milliseconds(1)) { _ in
                entered.open()
                let released = release.wait(timeout: .seconds(10))
                releasedByTheTask.withLock { $0 = released }
            }
        )
        try #require(await poll { entered.opened }, "the handler never started")

        let waiters = ProcessInfo.processInfo.activeProcessorCount * 4
        let started = Locked(0)
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<waiters {
                group.addTask {
                    started.withLock { $0 += 1 }
                    await timer.cancelAndAwaitHandlers()
                }
            }
            group.addTask {
                if await poll(timeout: .seconds(20), { started.current == waiters }) { release.open() }
            }
        }
        #expect(releasedByTheTask.current == true, "the waiters held every thread, so nothing released the handler")
        #expect(timer.state == .idle || timer.state == .cancelled)
    }
}

/// A `ManualTimeline` that also records every schedule it is asked to arm.
final class RecordingBackend: TimerBackend {
    let timeline = ManualTimeline()
    private let schedules = Locked<[TimerSchedule]>([])

    var armed: [TimerSchedule] { self.schedules.current }

    func now(_ clock: TimerClock) -> Int64 {
        self.timeline.now(clock)
    }

    func arm(
        _ schedule: TimerSchedule,
        clock: TimerClock,
        queue: DispatchQueue?,
        fire: @escaping @Sendable (Tick) -> Void
    ) -> (any ArmedTimer)? {
        self.schedules.withLock { $0.append(schedule) }
        return self.timeline.arm(schedule, clock: clock, queue: queue, fire: fire)
    }
}

/// Re-checks `condition` every millisecond, suspending in between, until it holds or
/// `timeout` passes: waits without holding a thread.
func poll(timeout: Duration = .seconds(5), _ condition: () -> Bool) async -> Bool {
    let end = ContinuousClock.now + timeout
    while !condition() {
        guard ContinuousClock.now < end else { return false }
        try? await Task.sleep(for: .milliseconds(1))
    }
    return true
}
