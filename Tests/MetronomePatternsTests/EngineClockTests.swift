import Foundation
import Metronome
import MetronomeTesting
import Testing

@Suite(.serialized)
struct EngineClockTests {
    let engine: TimerEngine
    let clock: EngineClock

    init() throws {
        self.engine = try makeEngine()
        self.clock = EngineClock(backend: .engine(self.engine))
    }

    @Test(.timeLimit(.minutes(1)))
    func basics() {
        #expect(self.clock.minimumResolution == .nanoseconds(1))
        let before = TimerClock.monotonic.now()
        let now = self.clock.now
        #expect(now >= before)
        #expect(now <= TimerClock.monotonic.now())
        #expect(EngineClock(backend: .engine(self.engine), clock: .boottime).clock == .boottime)
    }

    @Test(.timeLimit(.minutes(1)))
    func taskSleepIsNeverEarly() async throws {
        for _ in 0..<100 {
            let start = TimerClock.monotonic.now()
            let continuousStart = ContinuousClock.now
            try await Task.sleep(for: .milliseconds(2), tolerance: .microseconds(50), clock: self.clock)
            #expect(TimerClock.monotonic.now() >= start.advanced(by: .milliseconds(2)))
            #expect(ContinuousClock.now - continuousStart >= .milliseconds(2))
        }
        for _ in 0..<100 {
            let deadline = self.clock.now.advanced(by: .microseconds(Int.random(in: 1...3000)))
            try await self.clock.sleep(until: deadline, tolerance: nil)
            #expect(TimerClock.monotonic.now() >= deadline)
        }
        #expect(await eventually { self.engine.counters.armed == 0 })
    }

    @Test(.timeLimit(.minutes(1)))
    func sleepOnOtherClocksIsNeverEarly() async throws {
        for timerClock in [TimerClock.boottime, .wall] {
            let clock = EngineClock(backend: .engine(self.engine), clock: timerClock)
            for _ in 0..<20 {
                let deadline = clock.now.advanced(by: .milliseconds(1))
                try await clock.sleep(until: deadline)
                #expect(timerClock.now() >= deadline)
            }
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func passedDeadlineReturnsAtOnce() async throws {
        let fired = self.engine.counters.fired
        try await self.clock.sleep(until: self.clock.now.advanced(by: .milliseconds(-5)))
        try await self.clock.sleep(until: self.clock.now)
        #expect(self.engine.counters.fired == fired)
        #expect(self.engine.counters.armed == 0)
    }

    @Test(.timeLimit(.minutes(1)))
    func cancellingMidSleepThrowsPromptly() async throws {
        for _ in 0..<20 {
            let clock = self.clock
            let task = Task { try await clock.sleep(until: clock.now.advanced(by: .seconds(30))) }
            #expect(await eventually { self.engine.counters.armed == 1 })
            task.cancel()
            // Ended by the cancel, not by its deadline, which would have returned normally.
            let result = await task.result
            #expect(throws: CancellationError.self) { try result.get() }
            #expect(self.engine.counters.armed == 0)
        }
    }

    /// A sleep until the end of time (or a tolerance that would run past it) sleeps until
    /// cancelled: the tolerance shrinks to what the clock can hold.
    @Test(.timeLimit(.minutes(1)), arguments: [Int64.max, Int64.max - 5])
    func sleepingUntilTheEndOfTimeWaitsForCancellation(deadline: Int64) async throws {
        let clock = self.clock
        for tolerance in [nil, Duration.seconds(1), .seconds(Int64.max)] {
            let task = Task { try await clock.sleep(until: TimerInstant(nanoseconds: deadline), tolerance: tolerance) }
            #expect(await eventually { self.engine.counters.armed == 1 }, "tolerance \(String(describing: tolerance))")
            task.cancel()
            await #expect(throws: CancellationError.self) { try await task.value }
            #expect(self.engine.counters.armed == 0)
        }
    }

    /// On a virtual clock standing before 0, a sleep until an instant there wakes at 0, the
    /// first a timer can be armed for: late, never early, and not refused.
    @Test(.timeLimit(.minutes(1)))
    func aSleepBeforeTimeZeroWakesAtZero() async throws {
        let timeline = ManualTimeline(startingAt: TimerInstant(nanoseconds: .min))
        let clock = EngineClock(backend: .custom(timeline))
        let task = Task { try await clock.sleep(until: TimerInstant(nanoseconds: -1_000), tolerance: .seconds(1)) }
        await timeline.waitForArmedTimers(1)
        timeline.advance(to: TimerInstant(nanoseconds: -1))
        #expect(timeline.armedCount == 1)
        timeline.advance(to: TimerInstant(nanoseconds: 0))
        #expect(timeline.armedCount == 0)
        try await task.value
    }

    @Test(.timeLimit(.minutes(1)))
    func cancellationRacingTheSleepLeavesNothingArmed() async throws {
        let clock = self.clock
        for round in 0..<500 {
            let task = Task { try await clock.sleep(until: clock.now.advanced(by: .seconds(30))) }
            if round % 2 == 0 { await Task.yield() }
            task.cancel()
            await #expect(throws: CancellationError.self) { try await task.value }
        }
        #expect(await eventually { self.engine.counters.armed == 0 })
    }

    @Test(.timeLimit(.minutes(1)))
    func alreadyCancelledTaskThrowsEvenForPassedDeadline() async throws {
        let clock = self.clock
        let task = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            try await clock.sleep(until: clock.now.advanced(by: .seconds(-1)))
        }
        await #expect(throws: CancellationError.self) { try await task.value }
        #expect(self.engine.counters.armed == 0)
    }

    @Test(.timeLimit(.minutes(1)))
    func sleepOnAStoppedEngineThrows() async throws {
        let engine = try makeEngine()
        await engine.shutdown()
        let clock = EngineClock(backend: .engine(engine))
        let error = await #expect(throws: TimerError.self) {
            try await clock.sleep(until: clock.now.advanced(by: .milliseconds(1)))
        }
        // The core's own answer, naming the call that refused; without the engine, the
        // shutdown that made its GCD stand-in refuse.
        #expect(error?.code == ESHUTDOWN)
        #expect(error?.operation == (isEngineCompiledIn ? "mtr_timer_create" : "mtr_engine_stop"))
    }

    /// A sleep under way when its engine shuts down can never be ended by its timer: it
    /// throws `ESHUTDOWN` at the shutdown instead of suspending its task for good.
    @Test(.timeLimit(.minutes(1)))
    func aShutdownEndsTheSleepsOnItsEngine() async throws {
        let engine = try makeEngine()
        let clock = EngineClock(backend: .engine(engine))
        let sleeps = (0..<3).map { index in
            Task { try await clock.sleep(until: clock.now.advanced(by: .seconds(3600 + index))) }
        }
        #expect(await eventually { engine.counters.armed == 3 })
        await engine.shutdown()
        for sleep in sleeps {
            let error = await #expect(throws: TimerError.self) { try await sleep.value }
            #expect(error?.code == ESHUTDOWN)
            #expect(error?.operation == "mtr_engine_stop")
        }
    }

    /// Sleeps that start while their engine shuts down on another thread all end: refused
    /// before the stop, or ended by it. None is left waiting.
    @Test(.timeLimit(.minutes(1)))
    func sleepsRacingAShutdownAllEnd() async throws {
        // The shutdown comes 0 to 1.9 ms after the sleeps are started.
        for round in 0..<20 {
            let engine = try makeEngine()
            let clock = EngineClock(backend: .engine(engine))
            let sleeps = (0..<50).map { _ in
                Task { try await clock.sleep(until: clock.now.advanced(by: .seconds(3600))) }
            }
            usleep(UInt32(round * 100))
            await engine.shutdown()
            for sleep in sleeps {
                let error = await #expect(throws: TimerError.self) { try await sleep.value }
                #expect(error?.code == ESHUTDOWN)
            }
        }
    }
}
