#if Engine
// Firing contracts of the C core on real time: one-shots on every clock, repeating
// schedules without drift, overruns, the spin window, thread settings and the
// re-evaluation of wall-clock timers.
import CMetronome
import Glibc
import Synchronization
import Testing

extension CoreContractTests {
    @Suite(.serialized, .tags(.realTime))
    struct Firing {
        @Test(arguments: mtr_clock_id.all)
        func oneShotsFireOnceAndNeverEarly(clock: mtr_clock_id) throws {
            let engine = try Engine()
            let base = Time.now(clock)
            var deadlines: [Int64] = []
            for k in 0..<25 {
                let probe = try engine.makeTimer()
                let deadline = base + 5 * Time.ms + Int64(k) * Time.ms
                deadlines.append(deadline)
                try #require(probe.armOnce(clock, at: deadline) == 0)
            }
            #expect(engine.waitFirings(deadlines.count))
            // A second firing of any of them would land within the next few deadlines' span.
            #expect(!engine.log.wait(timeoutNs: 40 * Time.ms) { $0.firings.count > deadlines.count })

            let firings = engine.firings
            #expect(firings.count == deadlines.count)
            #expect(Set(firings.map(\.probe)).count == deadlines.count, "a timer fired twice")
            let probes = engine.allProbes
            for firing in firings {
                #expect(firing.scheduled == deadlines[firing.probe])
                #expect(firing.clock == clock)
                #expect(firing.timer == probes[firing.probe].id)
                #expect(firing.missed == 0 && firing.sequence == 0)
            }
            // However late a stalled machine runs them, they fire in deadline order.
            #expect(firings.map(\.scheduled) == deadlines, "not in deadline order")
            expectNeverEarly(firings)
            #expect(engine.counters.fired == UInt64(deadlines.count))
            #expect(engine.counters.armed == 0)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// 5,000 periods of 200 µs: every deadline is start + sequence·period exactly,
        /// whatever the firing latency was, so error never accumulates.
        @Test func repeatingScheduleHasNoDrift() throws {
            let engine = try Engine(expectedTimers: 5_100)
            let probe = try engine.makeTimer()
            let period = 200 * Time.us
            let start = Time.monotonic() + 5 * Time.ms
            try #require(probe.armRepeating(start: start, period: period) == 0)
            #expect(engine.waitFirings(5_000))
            #expect(probe.cancelSync() == 0)

            let firings = engine.firings
            let counters = engine.counters
            try #require(firings.count >= 5_000)
            #expect(counters.fired == UInt64(firings.count), "cancel_sync returned with a callback pending")
            expectScheduleContract(firings, start: start, period: period)
            #expect(counters.missed_periods == firings.reduce(0) { $0 + $1.missed })
            #expect(firings.last!.sequence >= 4_999)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// A callback that overruns by 3.5 periods: deadlines k+1...k+3 pass meanwhile. The
        /// next tick stands for k+3 and reports k+1 and k+2 as missed; the tick after it is
        /// k+4: no burst of passed deadlines.
        @Test func overrunSkipsPassedDeadlinesWithoutBurst() throws {
            let engine = try Engine()
            let period = 10 * Time.ms
            let probe = try engine.makeTimer { callback in
                if callback.probe.fires.load(ordering: .relaxed) == 3 {
                    Time.sleep(period * 7 / 2)
                }
            }
            let start = Time.monotonic() + 5 * Time.ms
            try #require(probe.armRepeating(start: start, period: period) == 0)
            #expect(engine.waitFirings(10))
            #expect(probe.cancelSync() == 0)

            let firings = engine.firings
            try #require(firings.count >= 10)
            let overrun = firings[2]
            let late = firings[3]
            let after = firings[4]
            #expect(late.startNs >= overrun.endNs)
            #expect(late.sequence == overrun.sequence + late.missed + 1)
            let earliestCovered = late.scheduled - Int64(late.missed) * period
            #expect(late.fired - earliestCovered >= period * 5 / 2, "the lateness is not reported whole")
            #expect(late.missed >= 2, "missed \(late.missed) after a 3.5-period overrun")
            #expect(after.sequence == late.sequence + after.missed + 1)
            #expect(after.sequence >= overrun.sequence + 4, "a skipped deadline fired after the late tick")
            // No burst: the next deadline was still ahead when the late tick fired.
            #expect(after.scheduled > late.fired, "a passed deadline fired back-to-back")
            expectScheduleContract(firings, start: start, period: period)
            #expect(engine.counters.missed_periods == firings.reduce(0) { $0 + $1.missed })
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// A repeating timer with leeway (0...period is allowed) keeps the schedule contract
        /// and its rate.
        @Test(arguments: [0, 5 * Time.ms, 10 * Time.ms])
        func repeatingWithLeewayKeepsTheScheduleContract(leeway: Int64) throws {
            let (engine, probe) = try Engine.withTimer()
            let period = 10 * Time.ms
            let start = Time.monotonic() + 5 * Time.ms
            try #require(probe.armRepeating(start: start, period: period, leeway: leeway) == 0)
            #expect(engine.waitFirings(20))
            #expect(probe.cancelSync() == 0)

            let firings = engine.firings
            expectScheduleContract(firings, start: start, period: period)
            let missed = firings.reduce(0) { $0 + $1.missed }
            print("leeway \(leeway / Time.ms) ms: \(firings.count) firings, \(missed) periods missed")
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// Started 23 ms in the past with a 10 ms period and 5 ms leeway, the deadline at
        /// -3 ms has passed although its window is still open: the first tick stands for it,
        /// reporting the two before as missed, and the next one waits for +7 ms. Firing for
        /// -13 ms instead left -3 ms due, to fire back to back in the same wake-up.
        @Test func lateStartWithLeewayFiresOnceForEveryPassedDeadline() throws {
            let (engine, probe) = try Engine.withTimer()
            let period = 10 * Time.ms
            let start = Time.monotonic() - 23 * Time.ms
            try #require(probe.armRepeating(start: start, period: period, leeway: 5 * Time.ms) == 0)
            #expect(engine.waitFirings(2))
            #expect(probe.cancelSync() == 0)

            let firings = engine.firings
            try #require(firings.count >= 2)
            let late = firings[0]
            #expect(late.sequence >= 2 && late.missed == late.sequence, "\(late)")
            #expect(firings[1].scheduled > late.fired, "a passed deadline fired after the late tick")
            expectScheduleContract(firings, start: start, period: period)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// counters.late counts exactly the firings later than window + late threshold: a
        /// callback that blocks the firing thread makes the timers behind it late.
        @Test func lateCounterMatchesTheTicks() throws {
            let threshold = 2 * Time.ms
            let engine = try Engine(lateThresholdNs: threshold)
            let base = Time.monotonic() + 3 * Time.ms
            let blocker = try engine.makeTimer { _ in Time.sleep(15 * Time.ms) }
            try #require(blocker.armOnce(at: base) == 0)
            var leeways: [Int: Int64] = [blocker.index: 0]
            for k in 0..<8 {
                let probe = try engine.makeTimer()
                let leeway = Int64(k % 2) * 4 * Time.ms
                leeways[probe.index] = leeway
                try #require(probe.armOnce(at: base + Time.ms + Int64(k) * Time.ms, leeway: leeway) == 0)
            }
            #expect(engine.waitFirings(9))
            let firings = engine.firings
            let late = firings.filter { $0.fired - ($0.scheduled + leeways[$0.probe]!) > threshold }
            #expect(late.count >= 1, "the blocked timers were not late")
            #expect(engine.counters.late == UInt64(late.count))
            expectNeverEarly(firings)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// With a spin window the firing thread wakes early and spins to the deadline:
        /// still never early.
        @Test func spinWindowNeverFiresEarly() throws {
            let spin = 200 * Time.us
            let engine = try Engine(spinNs: spin)
            #expect(engine.info.spin_ns == spin)
            let base = Time.monotonic()
            var generator = SplitMix64(seed: 0x5EED_0001)
            for _ in 0..<40 {
                let probe = try engine.makeTimer()
                let deadline = base + 3 * Time.ms + Int64.random(in: 0..<40 * Time.ms, using: &generator)
                try #require(probe.armOnce(at: deadline) == 0)
            }
            // Two sharing a deadline, and one within the spin window of another.
            let twin = try engine.makeTimer()
            let near = try engine.makeTimer()
            try #require(twin.armOnce(at: base + 20 * Time.ms) == 0)
            try #require(near.armOnce(at: base + 20 * Time.ms + spin / 2) == 0)
            #expect(engine.waitFirings(42))
            let firings = engine.firings
            #expect(firings.count == 42)
            expectNeverEarly(firings)
            #expect(firings.map(\.scheduled) == firings.map(\.scheduled).sorted(), "not in deadline order")
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// SCHED_FIFO priority 10 is granted or refused with EPERM; either way the
        /// engine reports it truthfully and works.
        @Test func realtimePriorityIsGrantedOrReported() throws {
            // What this process may do, asked of a thread of the test's own.
            let permitted = Atomic<Int32>(-1)
            try PosixThread.spawn {
                var param = sched_param(sched_priority: 10)
                permitted.store(pthread_setschedparam(pthread_self(), SCHED_FIFO, &param), ordering: .relaxed)
            }.join()
            let expected = permitted.load(ordering: .relaxed)
            let engine = try Engine(realtimePriority: 10)
            let info = engine.info
            #expect(info.realtime_error == expected, "engine: error \(info.realtime_error); probe: \(expected)")
            #expect(info.realtime_priority == (expected == 0 ? 10 : 0))
            #expect(info.cpu == -1 && info.cpu_error == 0)
            print("SCHED_FIFO 10: granted \(info.realtime_priority), error \(info.realtime_error)")
            try expectFiresOnTime(engine)
        }

        /// The refusal path, whatever this process may do: a child that gave up root asks
        /// for SCHED_FIFO, is refused with EPERM, says so, and its engine still fires.
        @Test(
            .disabled(if: Bounds.threadSanitized, "TSan does not support threads after a multi-threaded fork"))
        func refusedRealtimePriorityIsReportedAndTheEngineWorks() throws {
            let code = exitCodeOfChild {
                if getuid() == 0 {
                    // nobody: no CAP_SYS_NICE, and RLIMIT_RTPRIO 0 refuses SCHED_FIFO.
                    var limit = rlimit(rlim_cur: 0, rlim_max: 0)
                    guard setrlimit(__rlimit_resource_t(__RLIMIT_RTPRIO.rawValue), &limit) == 0,
                        setgid(65534) == 0, setuid(65534) == 0
                    else { return 200 }
                }
                var config = mtr_engine_config()
                mtr_engine_config_init(&config)
                config.on_fire = { _, _ in }
                config.realtime_priority = 10
                var created: OpaquePointer?
                guard mtr_engine_create(&config, &created) == 0, let engine = created else { return 201 }
                defer { mtr_engine_destroy(engine) }
                var info = mtr_engine_info()
                mtr_engine_get_info(engine, &info)
                if info.realtime_priority == 10 && info.realtime_error == 0 { return 202 }  // granted after all
                guard info.realtime_priority == 0 && info.realtime_error == EPERM else { return 203 }
                var id: mtr_timer_id = 0
                _ = mtr_timer_create(engine, nil, &id)
                _ = mtr_timer_arm_once(engine, id, .MTR_CLOCK_MONOTONIC, Time.monotonic() + 2 * Time.ms, 0)
                return firedCount(of: engine, reaches: 1) ? 0 : 204
            }
            guard let code else { return }
            #expect(code != 200, "could not drop privileges in the child")
            #expect(code != 201, "engine create failed when SCHED_FIFO is refused")
            #expect(code != 202, "SCHED_FIFO granted to an unprivileged child; the refusal path went untested")
            #expect(code != 203, "a refused priority was not reported as priority 0 and EPERM")
            #expect(code != 204, "the engine did not fire after its priority was refused")
            #expect(code == 0 || (200...204).contains(code), "exit code \(code)")
        }

        @Test func cpuAffinityIsGrantedOrReported() throws {
            let engine = try Engine(cpu: 0)
            let info = engine.info
            #expect(
                (info.cpu == 0 && info.cpu_error == 0) || (info.cpu == -1 && info.cpu_error != 0),
                "cpu \(info.cpu), error \(info.cpu_error)")
            #expect(info.realtime_priority == 0 && info.realtime_error == 0)
            print("CPU 0 affinity: pinned to \(info.cpu), error \(info.cpu_error)")
            try expectFiresOnTime(engine)
        }

        private func expectFiresOnTime(_ engine: Engine, sourceLocation: SourceLocation = #_sourceLocation) throws {
            let base = Time.monotonic()
            for k in 0..<10 {
                let probe = try engine.makeTimer()
                try #require(probe.armOnce(at: base + Int64(k + 2) * Time.ms) == 0)
            }
            #expect(engine.waitFirings(10), sourceLocation: sourceLocation)
            expectNeverEarly(engine.firings, sourceLocation: sourceLocation)
            engine.destroy()
            engine.expectAllReleasedOnce(sourceLocation: sourceLocation)
        }

        // MARK: Idle

        /// An engine with nothing due sleeps: after its timers fired, the wake-up counter
        /// stands still.
        @Test func idleEngineStaysAsleep() throws {
            let engine = try Engine()
            let base = Time.monotonic()
            for (k, clock) in mtr_clock_id.all.enumerated() {
                let probe = try engine.makeTimer()
                try #require(probe.armOnce(clock, at: Time.now(clock) + Int64(k + 1) * Time.ms) == 0)
            }
            let far = try engine.makeTimer()
            try #require(far.armOnce(at: base + 3_600 * Time.s) == 0)
            #expect(engine.waitFirings(3))
            let before = engine.counters.wakeups
            engine.log.wait(timeoutNs: 50 * Time.ms) { _ in false }
            let after = engine.counters.wakeups
            #expect(after - before <= 1, "\(after - before) wake-ups in 50 ms with nothing due")
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// The same when libevent cannot use epoll (EVENT_NOEPOLL, read by libevent when a
        /// base is created, makes it fall back to poll, which has no edge-triggering): the
        /// engine must either not spin or refuse to start. Run in a forked child so the
        /// environment change cannot reach engines of other tests.
        @Test(
            .disabled(if: Bounds.threadSanitized, "TSan does not support threads after a multi-threaded fork"))
        func idleEngineStaysAsleepWithoutEpoll() throws {
            let code = exitCodeOfChild {
                setenv("EVENT_NOEPOLL", "1", 1)
                var config = mtr_engine_config()
                mtr_engine_config_init(&config)
                config.on_fire = { _, _ in }
                var created: OpaquePointer?
                guard mtr_engine_create(&config, &created) == 0, let engine = created else { return 254 }
                var id: mtr_timer_id = 0
                _ = mtr_timer_create(engine, nil, &id)
                _ = mtr_timer_arm_once(engine, id, .MTR_CLOCK_MONOTONIC, Time.monotonic() + Time.ms, 0)
                guard firedCount(of: engine, reaches: 1) else { return 253 }
                var counters = mtr_counters()
                mtr_engine_get_counters(engine, &counters)
                let before = counters.wakeups
                Time.sleep(50 * Time.ms)
                mtr_engine_get_counters(engine, &counters)
                let idleWakeups = counters.wakeups - before
                let fired = counters.fired
                mtr_engine_destroy(engine)
                return fired != 1 ? 253 : Int32(min(idleWakeups, 250))
            }
            guard let code else { return }
            if code == 254 {
                print("without epoll the engine refuses to start: acceptable, it cannot spin")
                return
            }
            #expect(code != 253, "the timer did not fire exactly once without epoll")
            #expect(code <= 1, "\(code == 250 ? "250+" : "\(code)") wake-ups in 50 ms with nothing due (poll backend)")
        }

        // MARK: Wall-clock re-evaluation

        /// clock_changed re-evaluates the wall timers: one due in a second stays armed
        /// and does not fire early.
        @Test func clockChangeDoesNotFireAFutureWallTimerEarly() throws {
            let (engine, probe) = try Engine.withTimer()
            let deadline = Time.now(.MTR_CLOCK_REALTIME) + 1 * Time.s
            try #require(probe.armOnce(.MTR_CLOCK_REALTIME, at: deadline) == 0)
            let before = engine.counters
            #expect(mtr_engine_clock_changed(engine.handle, .MTR_CLOCK_REALTIME) == 0)
            #expect(engine.counters.clock_steps >= before.clock_steps + 1)
            #expect(!engine.log.wait(timeoutNs: 100 * Time.ms) { !$0.firings.isEmpty }, "fired a second early")
            #expect(engine.counters.armed == 1)
            // Still armed for its deadline: move it near and it fires, on time.
            let near = Time.now(.MTR_CLOCK_REALTIME) + 5 * Time.ms
            #expect(probe.armOnce(.MTR_CLOCK_REALTIME, at: near) == 0)
            #expect(mtr_engine_clock_changed(engine.handle, .MTR_CLOCK_REALTIME) == 0)
            #expect(engine.waitFirings(1))
            expectNeverEarly(engine.firings)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// A wall timer whose window has opened but whose timerfd is set for the window's
        /// end (an hour's leeway, far beyond the test's patience) fires when clock_changed
        /// re-evaluates it.
        @Test func clockChangeFiresAWallTimerThatIsDue() throws {
            let (engine, probe) = try Engine.withTimer()
            let deadline = Time.now(.MTR_CLOCK_REALTIME) + 5 * Time.ms
            try #require(probe.armOnce(.MTR_CLOCK_REALTIME, at: deadline, leeway: 3_600 * Time.s) == 0)
            // Nothing wakes the engine before the window's end...
            #expect(!engine.log.wait(timeoutNs: 30 * Time.ms) { !$0.firings.isEmpty })
            let steps = engine.counters.clock_steps
            // ...until the clock is re-evaluated.
            #expect(mtr_engine_clock_changed(engine.handle, .MTR_CLOCK_REALTIME) == 0)
            #expect(engine.waitFirings(1))
            #expect(engine.counters.clock_steps >= steps + 1)
            let firings = engine.firings
            #expect(firings.count == 1)
            #expect(firings.first?.scheduled == deadline)
            expectNeverEarly(firings)
            // The other clocks are not disturbed by a wall-clock re-evaluation.
            #expect(mtr_engine_clock_changed(engine.handle, .MTR_CLOCK_MONOTONIC) == 0)
            #expect(mtr_engine_clock_changed(engine.handle, .MTR_CLOCK_BOOTTIME) == 0)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// Real wall-clock steps while a thread arms ever earlier wall timers: after a step
        /// the kernel arms a timerfd and reports the step to the first `timerfd_settime`
        /// with `ECANCELED`, where the firing thread's read would have seen it. That aborted
        /// the process; now each such step is counted and the timerfd expired, so every
        /// wall timer is re-evaluated, and all of them fire once, none early. With several
        /// shards the firing thread meets it too, re-arming another shard's timerfd.
        ///
        /// In a child, with C calls only, as an abort would end the test process.
        @Test(.enabled(if: WallClock.canStep), arguments: [UInt32(1), 4])
        func wallClockStepsWhileArmingAreCountedNotFatal(shards: UInt32) {
            let rounds = 20
            let code = exitCodeOfChild(timeoutNs: 20 * Time.s) {
                var config = mtr_engine_config()
                mtr_engine_config_init(&config)
                config.shards = shards
                // The context counts firings and early ones; read after the engine is gone.
                config.on_fire = { context, tick in
                    guard let seen = context?.assumingMemoryBound(to: Int64.self) else { return }
                    seen[0] += 1
                    if tick.pointee.fired_ns < tick.pointee.scheduled_ns { seen[1] += 1 }
                }
                var handle: OpaquePointer?
                guard mtr_engine_create(&config, &handle) == 0, let engine = handle,
                    let seen = calloc(2, 8)?.assumingMemoryBound(to: Int64.self)
                else { return 10 }
                // A far timer first, so that every step finds the wall timerfd armed.
                var far: mtr_timer_id = 0
                let hourAhead = Time.now(.MTR_CLOCK_REALTIME) + 3_600 * Time.s
                guard mtr_timer_create(engine, nil, &far) == 0,
                    mtr_timer_arm_once(engine, far, .MTR_CLOCK_REALTIME, hourAhead, 0) == 0
                else { return 11 }
                for round in 0..<rounds {
                    var id: mtr_timer_id = 0
                    guard mtr_timer_create(engine, seen, &id) == 0 else { return 12 }
                    guard WallClock.step() else { return 13 }
                    // 3 ms earlier than the last one, a round apart: each moves the timerfd.
                    let deadline = Time.now(.MTR_CLOCK_REALTIME) + Int64(3 * (rounds - round)) * Time.ms
                    guard mtr_timer_arm_once(engine, id, .MTR_CLOCK_REALTIME, deadline, 0) == 0 else { return 14 }
                    Time.sleep(Time.ms)
                }
                _ = firedCount(of: engine, reaches: UInt64(rounds))
                var counters = mtr_counters()
                mtr_engine_get_counters(engine, &counters)
                guard counters.clock_steps >= 1 else { return 15 }
                mtr_engine_destroy(engine)
                guard seen[0] == rounds else { return 16 }
                return seen[1] == 0 ? 0 : 17
            }
            #expect(code == 0)
        }
    }
}

/// The wall clock, set to its own reading: a step of a few nanoseconds back, which still
/// tells every wall timerfd that the clock was set. It takes `CAP_SYS_TIME`.
enum WallClock {
    static let canStep = step()

    static func step() -> Bool {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return clock_settime(CLOCK_REALTIME, &now) == 0
    }
}

/// Polls the engine's fired counter until it reaches `count` or the test's patience runs
/// out; returns whether it did. C calls only, so a forked child may call it.
private func firedCount(of engine: OpaquePointer, reaches count: UInt64) -> Bool {
    var counters = mtr_counters()
    let giveUp = Time.monotonic() + Bounds.patienceNs
    repeat {
        mtr_engine_get_counters(engine, &counters)
        if counters.fired >= count { return true }
        Time.sleep(Time.ms)
    } while Time.monotonic() < giveUp
    return false
}

/// The schedule contract of a repeating timer, exactly, as the header states it:
/// - a tick stands for deadline start + sequence·period (the latest one it covers);
/// - each tick's sequence is the previous one's + its own missed + 1 (the first: missed);
/// - it stands for the latest deadline that had passed when it fired, so the next one had
///   not: scheduled <= fired < scheduled + period, and nothing bursts;
/// - never early.
func expectScheduleContract(
    _ firings: [FiredTick], start: Int64, period: Int64,
    sourceLocation: SourceLocation = #_sourceLocation
) {
    var wrongDeadline = 0
    var wrongSequence = 0
    var wrongMissed = 0
    var problems: [String] = []
    for (i, firing) in firings.enumerated() {
        if firing.scheduled != start + Int64(firing.sequence) * period {
            wrongDeadline += 1
            problems.append("tick \(i) stands for \(firing.scheduled), off start + \(firing.sequence)·period")
        }
        let expected = (i == 0 ? 0 : firings[i - 1].sequence + 1) + firing.missed
        if firing.sequence != expected {
            wrongSequence += 1
            problems.append("tick \(i) has sequence \(firing.sequence), want \(expected)")
        }
        // Every passed deadline is covered; the next one had not passed.
        if firing.fired >= firing.scheduled + period {
            wrongMissed += 1
            problems.append(
                "tick \(i) fired \(firing.fired - firing.scheduled) ns after its deadline with missed \(firing.missed)")
        }
    }
    let first = problems.prefix(3).joined(separator: "; ")
    #expect(wrongDeadline == 0, "\(wrongDeadline) ticks off the schedule; \(first)", sourceLocation: sourceLocation)
    #expect(
        wrongSequence == 0, "\(wrongSequence) ticks not at previous + missed + 1; \(first)",
        sourceLocation: sourceLocation)
    #expect(
        wrongMissed == 0, "\(wrongMissed) ticks not for the latest passed deadline; \(first)",
        sourceLocation: sourceLocation)
    expectNeverEarly(firings, sourceLocation: sourceLocation)
}
#endif
