#if Engine
// The spin window of the C core: bounded by configuration, and cut short by an earlier
// timer or a stop.
import CMetronome
import Glibc
import Testing

extension CoreContractTests {
    @Suite(.serialized, .tags(.realTime))
    struct SpinWindow {
        /// The spin window is bounded: above MTR_SPIN_MAX_NS the configuration is refused,
        /// naming the setting.
        @Test func spinWindowAboveTheBoundIsRefused() throws {
            var config = mtr_engine_config()
            mtr_engine_config_init(&config)
            config.on_fire = { _, _ in }
            var setting = mtr_engine_setting.MTR_SETTING_NONE
            config.spin_ns = Int64(MTR_SPIN_MAX_NS)
            #expect(mtr_engine_config_check(&config, &setting) == 0 && setting == .MTR_SETTING_NONE)
            for spin in [Int64(MTR_SPIN_MAX_NS) + 1, 2 * Time.s, .max, -1] {
                config.spin_ns = spin
                #expect(mtr_engine_config_check(&config, &setting) == EINVAL && setting == .MTR_SETTING_SPIN)
                var handle: OpaquePointer?
                #expect(mtr_engine_create(&config, &handle) == EINVAL && handle == nil)
            }
        }

        /// A timer armed while the engine spins for a later one, with an earlier deadline,
        /// ends the spin: it fires before the later timer's deadline, not after it. A trial
        /// counts only if the test thread armed the earlier timer inside the spin and ahead
        /// of the later deadline, and the firing thread was not held past the later deadline
        /// (then it finds both due, whatever the spin did): the load spoils the others, which
        /// are reported and left out. Waiting out the spin fires the earlier timer after the
        /// later one's deadline, with the later one on time, in every counted trial; a
        /// preempted firing thread can fail one, so one that shows it is enough.
        @Test func anEarlierTimerEndsASpin() throws {
            let spin = Int64(MTR_SPIN_MAX_NS)
            var waitedOut: [Int64] = []
            var noticed = false
            var trials = LoadSpoiledTrials()
            for _ in 0..<200 where !noticed {
                let engine = try Engine(spinNs: spin)
                let later = try engine.makeTimer()
                let earlier = try engine.makeTimer()
                let laterDeadline = Time.monotonic() + 20 * Time.ms
                try #require(later.armOnce(at: laterDeadline) == 0)
                // A sleep overshoots by more than the spin lasts: sleep short, spin the rest.
                Time.sleep(laterDeadline - 5 * Time.ms - Time.monotonic())
                Time.spin(laterDeadline - spin / 2 - Time.monotonic())
                let earlierDeadline = Time.monotonic() + 50 * Time.us
                guard earlierDeadline < laterDeadline - spin / 4, engine.firings.isEmpty else {
                    trials.spoil("the test thread could not arm inside the spin")
                    engine.destroyAndExpectAllReleasedOnce()
                    continue
                }
                try #require(earlier.armOnce(at: earlierDeadline) == 0)
                #expect(engine.waitFirings(2))
                let firings = engine.firings
                engine.destroyAndExpectAllReleasedOnce()
                expectNeverEarly(firings)
                let first = try #require(firings.first { $0.probe == earlier.index })
                if first.fired < laterDeadline {
                    noticed = true
                } else if let laterFiring = firings.first(where: { $0.probe == later.index }),
                    laterFiring.fired - laterDeadline > 20 * Time.us
                {
                    trials.spoil(
                        "the firing thread was held \((laterFiring.fired - laterDeadline) / Time.us) µs past both deadlines"
                    )
                    continue
                } else {
                    waitedOut.append(first.fired - laterDeadline)
                }
                trials.count()
            }
            trials.report()
            #expect(
                noticed || trials.counted == 0,
                "the spin did not notice the earlier timer: \(waitedOut.map { $0 / Time.us }) µs past the later deadline"
            )
        }

        /// The wall clock steps back a second while the engine spins for a wall timer (as
        /// the spin reads it: SpinClockStep). The spin still ends within its window, in the
        /// firing thread's CPU time, and the engine re-arms for the deadline and fires the
        /// timer, never early; bounded only by the clock coming back to the deadline, the
        /// spin burned a CPU for the whole second.
        @Test func aWallClockStepBackEndsASpinWithinItsWindow() throws {
            let spin = Int64(MTR_SPIN_MAX_NS)
            let engine = try Engine(spinNs: spin)
            let firingThread = Monitor<pthread_t?>(nil)
            let probe = try engine.makeTimer { _ in firingThread.update { $0 = $0 ?? pthread_self() } }
            try #require(probe.armOnce(at: Time.monotonic()) == 0)
            try #require(firingThread.wait { $0 != nil })
            let thread = try #require(firingThread.read { $0 })
            defer { SpinClockStep.clear() }
            var spins: [Int64] = []
            // A trial counts if the engine spun for the deadline and saw the step, which it
            // does unless it woke past the deadline.
            for _ in 0..<20 where spins.isEmpty {
                let firedBefore = engine.firings.count
                let deadline = Time.now(.MTR_CLOCK_REALTIME) + 30 * Time.ms
                SpinClockStep.set(thread: thread, from: deadline - spin / 2, back: Time.s)
                let cpuBefore = cpuTime(of: thread)
                try #require(probe.armOnce(.MTR_CLOCK_REALTIME, at: deadline) == 0)
                #expect(engine.waitFirings(firedBefore + 1))
                let spent = cpuTime(of: thread) - cpuBefore
                SpinClockStep.clear()
                if SpinClockStep.stepped.load(ordering: .relaxed) > 0 { spins.append(spent) }
            }
            if spins.isEmpty { try Test.cancel("the engine never spun for the deadline") }
            // The spin's window, and as much again for the wake-ups around it.
            #expect(
                spins.allSatisfy { $0 <= 2 * spin + 10 * Time.ms },
                "the firing thread spent \(spins.map { $0 / Time.us }) µs of CPU")
            expectNeverEarly(engine.firings)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// A stop during a spin ends it at once: stop returns before the deadline spun for.
        @Test func stopEndsASpin() throws {
            let spin = Int64(MTR_SPIN_MAX_NS)
            var trials = LoadSpoiledTrials()
            var endedEarly = 0
            for _ in 0..<200 where endedEarly == 0 {
                let engine = try Engine(spinNs: spin)
                let probe = try engine.makeTimer()
                let deadline = Time.monotonic() + 10 * Time.ms
                try #require(probe.armOnce(at: deadline) == 0)
                Time.sleep(deadline - 5 * Time.ms - Time.monotonic())
                Time.spin(deadline - spin / 2 - Time.monotonic())
                // Counts only if the firing thread is spinning now: woken once, not yet due.
                if engine.counters.wakeups == 1, Time.monotonic() < deadline - spin / 4 {
                    trials.count()
                    engine.stop()
                    if Time.monotonic() < deadline { endedEarly += 1 }
                } else {
                    trials.spoil("the firing thread was not spinning when the test could stop it")
                }
                engine.stop()
                #expect(engine.firings.allSatisfy { $0.fired >= deadline })
                engine.destroyAndExpectAllReleasedOnce()
            }
            trials.report()
            // Trials run until one shows it; a run the load spoiled entirely tested nothing.
            #expect(
                endedEarly > 0 || trials.counted == 0,
                "stop waited for the spin to reach the deadline (\(trials.counted) trials)")
        }
    }
}
#endif
