@preconcurrency import Dispatch
import Glibc
import MetronomeTestSupport
import Synchronization
import Testing

@testable import Metronome

/// A one-shot on an engine pushed later, as an idle timeout is on each request: every
/// operation sees the push at once, a push racing the old deadline either moves the firing
/// or is refused, pushes from many threads leave one deadline that the timer fires for once,
/// and a timer dropped after a push never fires.
@Suite(.serialized, .tags(.realTime))
struct RescheduleRaceTests {
    private static func now() -> TimerInstant {
        TimerClock.monotonic.now()
    }

    /// A one-shot on an engine of its own, armed for `deadline`, and what its handler saw.
    /// The caller shuts the engine down.
    private static func armedOneShot(
        at deadline: TimerInstant, leeway: Duration = .zero
    ) throws -> (engine: TimerEngine, timer: SafeDispatchTimer, firings: OneShotFirings) {
        let engine = try TimerEngine()
        let timer = SafeDispatchTimer(backend: .engine(engine))
        let firings = OneShotFirings()
        #expect(timer.schedule(at: deadline, leeway: leeway) { firings.record($0) })
        return (engine, timer, firings)
    }

    @Test(.timeLimit(.minutes(1)))
    func everyOperationSeesAPushAtOnce() throws {
        let start = Self.now()
        let (engine, timer, firings) = try Self.armedOneShot(
            at: start.advanced(by: .seconds(10)), leeway: .microseconds(5))
        defer { engine.syncShutdown() }

        #expect(timer.reschedule(at: start.advanced(by: .seconds(15))))
        let pushed = start.advanced(by: .seconds(20))
        #expect(timer.reschedule(at: pushed))
        #expect(timer.currentSchedule?.deadlineNanoseconds == pushed.nanoseconds)
        #expect(timer.currentSchedule?.leewayNanoseconds == 5_000, "a push keeps the leeway")
        #expect(timer.suspend())
        #expect(timer.currentSchedule?.deadlineNanoseconds == pushed.nanoseconds)
        // Suspended, a reschedule only stores the schedule.
        #expect(timer.reschedule(after: .seconds(30)))
        #expect(timer.state == .suspended)
        #expect(timer.resume())
        #expect(timer.reschedule(deadline: .now() + .seconds(40)))
        #expect(timer.reschedule(deadline: .now() + .seconds(41)))
        let before = Self.now()
        #expect(timer.reschedule(after: .seconds(45)))
        let deadline = try #require(timer.currentSchedule?.deadlineNanoseconds)
        #expect(deadline >= before.advanced(by: .seconds(45)).nanoseconds)
        #expect(deadline <= Self.now().advanced(by: .seconds(45)).nanoseconds)
        // A period makes the timer repeat from then on.
        #expect(timer.reschedule(deadline: .now() + .seconds(50), repeating: .seconds(1)))
        #expect(timer.currentSchedule?.isRepeating == true)
        #expect(timer.reschedule(after: .seconds(40)))
        #expect(timer.reschedule(after: .seconds(41)))
        // An earlier deadline is no push: the timer re-arms for it and fires there, once.
        let soon = Self.now().advanced(by: .milliseconds(50))
        #expect(timer.reschedule(at: soon))
        #expect(timer.currentSchedule?.deadlineNanoseconds == soon.nanoseconds)
        #expect(eventually { firings.count.load(ordering: .acquiring) == 1 })
        #expect(firings.scheduled.load(ordering: .relaxed) == soon.nanoseconds)
        #expect(firings.clock.load(ordering: .relaxed) >= soon.nanoseconds, "fired early")
        #expect(timer.state == .idle)
        // A fired one-shot takes no push, nor does a cancelled timer.
        #expect(!timer.reschedule(at: pushed))
        #expect(timer.schedule(at: pushed) { firings.record($0) })
        #expect(timer.cancel())
        #expect(!timer.reschedule(at: pushed.advanced(by: .seconds(1))))
        #expect(timer.state == .cancelled)
    }

    /// Each round pushes a timer within tens of microseconds of its deadline, before or
    /// after it: a push that returned `true` moved the firing to its deadline, one that
    /// returned `false` found the timer fired. Either way the handler runs once.
    @Test(.timeLimit(.minutes(1)), arguments: [false, true])
    func aPushRacingItsOldDeadlineMovesTheFiringOrIsRefused(onQueue: Bool) throws {
        let engine = try TimerEngine()
        defer { engine.syncShutdown() }
        let queue = onQueue ? DispatchQueue(label: "metronome.tests.pushed-race") : nil
        var random = SplitMix64(seed: 7)
        // Each round's last deadline a reschedule accepted: one that returns `false` found
        // the timer fired, and so does every one after it (a stall here, under a sanitizer).
        var rounds: [(timer: SafeDispatchTimer, firings: OneShotFirings, deadline: Int64)] = []
        for _ in 0..<300 {
            let timer = SafeDispatchTimer(queue: queue, backend: .engine(engine))
            let firings = OneShotFirings()
            let first = Self.now().advanced(by: .milliseconds(1))
            var deadline = first.advanced(by: .microseconds(-500))
            #expect(timer.schedule(at: deadline) { firings.record($0) })
            if timer.reschedule(at: first) { deadline = first }
            let pushAt = first.advanced(by: .microseconds(Int64(random.next(below: 100) - 50)))
            while Self.now() < pushAt {}
            let pushed = Self.now().advanced(by: .milliseconds(2))
            if timer.reschedule(at: pushed) { deadline = pushed }
            rounds.append((timer, firings, deadline.nanoseconds))
        }
        #expect(
            eventually(timeout: .seconds(10)) {
                rounds.allSatisfy { $0.firings.count.load(ordering: .acquiring) > 0 }
            })
        usleep(5_000)
        for round in rounds {
            #expect(round.firings.count.load(ordering: .acquiring) == 1)
            let scheduled = round.firings.scheduled.load(ordering: .relaxed)
            #expect(scheduled == round.deadline, "fired for a deadline it had left")
            #expect(round.firings.clock.load(ordering: .relaxed) >= scheduled, "fired early")
            #expect(round.timer.state == .idle)
        }
    }

    /// Threads push one timer at once, to deadlines drawn in turn, some later and some
    /// earlier than the one it has. It fires once, for the deadline it ended with, which one
    /// of them set.
    @Test(.timeLimit(.minutes(1)))
    func pushesFromManyThreadsLeaveOneDeadline() throws {
        let base = Self.now().advanced(by: .seconds(1))
        let (engine, timer, firings) = try Self.armedOneShot(at: base)
        defer { engine.syncShutdown() }
        let drawn = Atomic(Int64(0))
        let accepted = LockedBox<Set<Int64>>([])
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            var mine: Set<Int64> = []
            for _ in 0..<2_000 {
                let deadline = base.advanced(by: .microseconds(drawn.add(1, ordering: .relaxed).newValue))
                if timer.reschedule(at: deadline) { mine.insert(deadline.nanoseconds) }
            }
            accepted.withLockedValue { $0.formUnion(mine) }
        }
        let final = try #require(timer.currentSchedule?.deadlineNanoseconds)
        let all = accepted.withLockedValue { $0 }
        #expect(all.count == 8_000, "a push was refused while the timer ran")
        #expect(all.contains(final))
        #expect(eventually(timeout: .seconds(10)) { firings.count.load(ordering: .acquiring) == 1 })
        usleep(5_000)
        #expect(firings.count.load(ordering: .acquiring) == 1)
        #expect(firings.scheduled.load(ordering: .relaxed) == final)
        #expect(firings.clock.load(ordering: .relaxed) >= final, "fired early")
    }

    /// An engine shut down under timers pushed later: a push after it is refused, and no
    /// handler runs.
    @Test(.timeLimit(.minutes(1)))
    func aPushAfterItsEngineShutDownIsRefused() throws {
        let engine = try TimerEngine()
        let firings = OneShotFirings()
        let first = Self.now().advanced(by: .seconds(10))
        let timers = (0..<100).map { _ in SafeDispatchTimer(backend: .engine(engine)) }
        for timer in timers {
            #expect(timer.schedule(at: first) { firings.record($0) })
            #expect(timer.reschedule(at: first.advanced(by: .seconds(1))))
        }
        engine.syncShutdown()
        for timer in timers {
            #expect(!timer.reschedule(at: first.advanced(by: .seconds(2))))
            #expect(!timer.reschedule(after: .seconds(20)))
            #expect(timer.state == .cancelled)
        }
        #expect(firings.count.load(ordering: .acquiring) == 0)
    }

    @Test(.timeLimit(.minutes(1)))
    func aTimerDroppedAfterAPushNeverFires() throws {
        let engine = try TimerEngine()
        defer { engine.syncShutdown() }
        let freed = LaterRescheduleTests.Canary.Count()
        let firings = OneShotFirings()
        var timers: [SafeDispatchTimer] = []
        let first = Self.now().advanced(by: .milliseconds(200))
        for index in 0..<100 {
            let timer = SafeDispatchTimer(backend: .engine(engine))
            let canary = LaterRescheduleTests.Canary(freed)
            #expect(timer.schedule(at: first) { tick in withExtendedLifetime(canary) { firings.record(tick) } })
            #expect(timer.reschedule(at: first.advanced(by: .microseconds(Int64(index) * 100))))
            #expect(timer.reschedule(at: first.advanced(by: .microseconds(Int64(index) * 100 + 50))))
            timers.append(timer)
        }
        timers = []
        // Past the last pushed deadline.
        while Self.now() < first.advanced(by: .milliseconds(30)) { usleep(1_000) }
        #expect(firings.count.load(ordering: .acquiring) == 0, "a dropped timer fired")
        #expect(eventually { freed.value.load(ordering: .acquiring) == 100 }, "handlers kept after their timers")
    }
}
