import Foundation
import Metronome
import MetronomeTesting
import Synchronization
import Testing

/// What a client meets across the types: instants that keep their clock, one answer for a
/// stopped engine, and a scheduler that buffers only for a client that reads its events.
@Suite
struct OneAPITests {
    // MARK: Instants keep their clock

    @Test(.timeLimit(.minutes(1)))
    func aSleepUntilAnInstantOfAnotherClockIsRefused() async throws {
        let wall = EngineClock(clock: .wall)
        await #expect(throws: TimerError.invalidArgument) {
            try await wall.sleep(until: EngineClock().now.advanced(by: .seconds(5)))
        }
        // The wall clock's own deadline is slept on, and never returns before it.
        let deadline = wall.now.advanced(by: .milliseconds(5))
        try await wall.sleep(until: deadline)
        #expect(TimerClock.wall.now() >= deadline)
    }

    @Test
    func aTimerRefusesADeadlineOfAnotherClock() throws {
        let timeline = ManualTimeline()
        let timer = SafeDispatchTimer(backend: .custom(timeline), clock: .boottime)
        let monotonic = TimerInstant(nanoseconds: 5, clock: .monotonic)
        #expect(!timer.schedule(at: monotonic) {})
        #expect(throws: TimerError.invalidArgument) { try timer.start(at: monotonic) {} }
        #expect(timer.state == .idle)
        #expect(try timer.start(at: TimerInstant(nanoseconds: 5, clock: .boottime)) {})
        #expect(!timer.reschedule(at: monotonic))
        #expect(timer.currentSchedule?.deadlineNanoseconds == 5)
    }

    /// Instants of different clocks sort, with one of `<`, `==`, `>` holding for any two.
    @Test
    func instantsOfEveryClockAreTotallyOrdered() {
        let instants = [5, 6, 7].flatMap { nanoseconds in
            TimerClock.allCases.map { TimerInstant(nanoseconds: Int64(nanoseconds), clock: $0) }
        }
        for lhs in instants {
            for rhs in instants {
                let holding = [lhs < rhs, lhs == rhs, rhs < lhs].filter { $0 }.count
                #expect(holding == 1, "\(lhs) on \(lhs.clock), \(rhs) on \(rhs.clock)")
            }
        }
        #expect(Set(instants).count == 9)
        #expect(instants.sorted() == instants)
    }

    @Test
    func ticksCarryTheirTimersClock() {
        let timeline = ManualTimeline()
        let ticks = Recorder<Tick>()
        for clock in TimerClock.allCases {
            let timer = SafeDispatchTimer(backend: .custom(timeline), clock: clock)
            #expect(timer.schedule(after: .zero) { ticks.append($0) })
            timeline.advance(by: .zero)
        }
        #expect(ticks.entries.map(\.scheduled.clock) == TimerClock.allCases)
        #expect(ticks.entries.map(\.fired.clock) == TimerClock.allCases)
    }

    /// `ContinuousClock` reads the boottime clock on Linux and `SuspendingClock` the
    /// monotonic one: their instants convert to the same nanoseconds those clocks read.
    @Test
    func standardInstantsConvertToTheirClocks() {
        let boottimeBefore = TimerClock.boottime.now()
        let continuous = TimerInstant(ContinuousClock.now)
        let boottimeAfter = TimerClock.boottime.now()
        #expect(continuous.clock == .boottime)
        #expect(boottimeBefore <= continuous && continuous <= boottimeAfter)

        let monotonicBefore = TimerClock.monotonic.now()
        let suspending = TimerInstant(SuspendingClock.now)
        let monotonicAfter = TimerClock.monotonic.now()
        #expect(suspending.clock == .monotonic)
        #expect(monotonicBefore <= suspending && suspending <= monotonicAfter)
    }

    // MARK: A stopped engine, on every type

    @Test(.timeLimit(.minutes(1)))
    func everyTypeReportsAStoppedEngine() async throws {
        let engine = try makeEngine()
        await engine.shutdown()
        let backend = SafeDispatchTimer.Backend.engine(engine)

        let timer = SafeDispatchTimer(backend: backend)
        #expect(!timer.schedule(after: .seconds(1)) {})
        let refused = #expect(throws: TimerError.engineShutDown) { try timer.start(after: .seconds(1)) {} }
        #expect(refused.map { "\($0)" } == "the timer's engine was shut down")

        let scheduler = TimerScheduler(backend: backend)
        var events = scheduler.events.makeAsyncIterator()
        let id = scheduler.schedule(after: .seconds(1))
        #expect(await events.next() == .cancelled(id))

        var ticks = engine.ticks(every: .seconds(1)).makeAsyncIterator()
        #expect(await ticks.next() == nil)

        let clock = EngineClock(backend: backend)
        let slept = await #expect(throws: TimerError.engineShutDown) { try await clock.sleep(for: .seconds(1)) }
        #expect(slept.map { "\($0)" } == "the timer's engine was shut down")
        // A deadline cannot throw an error of its own: its body runs cancelled instead.
        let bounded = await Task { await withDeadline(in: .seconds(1), clock: clock) { Task.isCancelled } }.value
        #expect(bounded)

        #expect(ExpiringValue(1, lifetime: .seconds(60), backend: backend).isExpired)
    }

    // MARK: Events only for a client that reads them

    @Test(.timeLimit(.minutes(2)))
    func aDelegateOnlySchedulerBuffersNoEvents() async throws {
        let engine = try makeEngine()
        let scheduler = TimerScheduler(backend: .engine(engine))
        let delegate = SchedulerDelegate()
        scheduler.setDelegate(delegate)
        let count = 100_000
        for _ in 0..<count { scheduler.schedule(after: .zero) }
        #expect(delegate.events.wait(forCount: count, timeout: .seconds(60)))
        // Read only now: the stream holds what is decided from here on, and none of the
        // deliveries before.
        var events = scheduler.events.makeAsyncIterator()
        let marker = scheduler.schedule(after: .zero)
        #expect(await events.next() == .executed(marker, willRepeat: false))
        await engine.shutdown()
    }
}
