#if Engine
// Cancel, cancel_sync and re-arm contracts of the C core on real time.
import CMetronome
import Glibc
import Testing

extension CoreContractTests {
    @Suite(.serialized, .tags(.realTime))
    struct Cancel {
        /// A repeating timer whose callback spins `work` of every `period`, once it fired
        /// `warmup` times and the test thread spun to a random point of a period.
        static func busyTimer(
            on engine: Engine, period: Int64, work: Int64, warmup: Int, generator: inout SplitMix64
        ) throws -> Probe {
            let probe = try engine.makeTimer { _ in Time.spin(work) }
            try #require(probe.armRepeating(start: Time.monotonic() + Time.ms, period: period) == 0)
            #expect(engine.log.wait { log in log.firings.lazy.filter { $0.probe == probe.index }.count >= warmup })
            Time.spin(Int64.random(in: 0..<period, using: &generator))
            return probe
        }

        /// After mtr_timer_cancel returns no callback starts that the firing thread had not
        /// already committed to: every later firing was committed (fired_ns) before the
        /// cancel returned, and at most one callback runs past it.
        @Test func cancelStopsNewCallbacksAtHighRate() throws {
            let engine = try Engine()
            let period = 100 * Time.us
            var overlapping = 0
            var generator = SplitMix64(seed: 0xCA9CE1)
            for trial in 0..<12 {
                let probe = try Self.busyTimer(
                    on: engine, period: period, work: 60 * Time.us, warmup: 40 + trial * 3, generator: &generator)
                #expect(probe.cancel() == 0)
                let cancelled = Time.monotonic()
                // Give a wrongly started callback 30 periods to show up.
                engine.log.wait(timeoutNs: 30 * period) { log in
                    log.firings.lazy.filter { $0.probe == probe.index && $0.startNs > cancelled }.count > 1
                }
                // Let the committed callback (if any) finish before reading the log.
                #expect(engine.log.wait { $0.running == 0 })
                let mine = engine.firings.filter { $0.probe == probe.index }
                let committedAfter = mine.filter { $0.fired >= cancelled }
                let startedAfter = mine.filter { $0.startNs >= cancelled }
                let runningAt = mine.filter { $0.endNs >= cancelled }
                #expect(committedAfter.isEmpty, "trial \(trial): a callback committed after cancel returned")
                #expect(startedAfter.count <= 1, "trial \(trial): \(startedAfter.count) callbacks started after cancel")
                #expect(runningAt.count <= 1, "trial \(trial): \(runningAt.count) callbacks ran past cancel")
                overlapping += runningAt.count
                #expect(probe.destroy() == 0)
            }
            // Not asserted: how often the cancel landed while a callback ran.
            print("cancel landed during a callback in \(overlapping) of 12 trials")
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// After mtr_timer_cancel_sync returns no callback of the timer is running, and none
        /// starts later.
        @Test func cancelSyncWaitsForTheRunningCallback() throws {
            let engine = try Engine()
            let period = 100 * Time.us
            var generator = SplitMix64(seed: 0x5CA9CE1)
            var overlapping = 0
            for trial in 0..<12 {
                let probe = try Self.busyTimer(
                    on: engine, period: period, work: 50 * Time.us, warmup: 30 + trial * 3, generator: &generator)
                let calledAt = Time.monotonic()
                #expect(probe.cancelSync() == 0)
                let returned = Time.monotonic()
                if engine.firings.contains(where: { $0.probe == probe.index && $0.endNs > calledAt }) {
                    overlapping += 1
                }
                let stillRunning = probe.inCallback.load(ordering: .acquiring)
                #expect(!stillRunning, "trial \(trial): callback still running")
                let fires = probe.fires.load(ordering: .acquiring)
                // Every logged callback had finished (endNs is written as it returns).
                let unfinished = engine.firings.filter {
                    $0.probe == probe.index && ($0.endNs == 0 || $0.endNs > returned)
                }
                #expect(unfinished.isEmpty, "trial \(trial): \(unfinished.count) callbacks outlived cancel_sync")
                #expect(
                    !engine.log.wait(timeoutNs: 30 * period) { log in
                        log.firings.contains { $0.probe == probe.index && $0.startNs > returned }
                    }, "trial \(trial): a callback started after cancel_sync")
                #expect(probe.fires.load(ordering: .acquiring) == fires)
                #expect(probe.destroy() == 0)
            }
            print("cancel_sync waited for a running callback in \(overlapping) of 12 trials")
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// A repeating timer that cancels itself on its fifth tick fires exactly five times,
        /// with cancel or with cancel_sync, which returns instead of waiting for the callback
        /// it is called from: that wait would never end.
        @Test(arguments: [false, true])
        func cancelFromInsideTheCallback(sync: Bool) throws {
            let engine = try Engine()
            let results = Monitor([Int32]())
            let period = 2 * Time.ms
            let probe = try engine.makeTimer { callback in
                if callback.probe.fires.load(ordering: .relaxed) == 5 {
                    let rc = sync ? callback.probe.cancelSync() : callback.probe.cancel()
                    results.update { $0.append(rc) }
                }
            }
            try #require(probe.armRepeating(start: Time.monotonic() + Time.ms, period: period) == 0)
            guard results.wait(until: { !$0.isEmpty }) else {
                Issue.record("cancelling from its own callback did not return (deadlock)")
                engine.markDestroyed()  // joining the stuck firing thread would hang
                return
            }
            #expect(!engine.log.wait(timeoutNs: 10 * period) { $0.firings.count > 5 }, "fired after cancelling itself")
            #expect(results.read { $0 } == [0])
            let firings = engine.firings
            #expect(firings.count == 5)
            #expect(zip(firings, firings.dropFirst()).allSatisfy { $0.sequence < $1.sequence })
            #expect(engine.counters.armed == 0)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// cancel_sync of timer B from timer A's callback (the same firing thread) returns at
        /// once, and B never fires again.
        @Test func cancelSyncFromAnotherTimersCallback() throws {
            let engine = try Engine()
            let period = Time.ms
            let b = try engine.makeTimer()
            let results = Monitor([(rc: Int32, returnedNs: Int64)]())
            let a = try engine.makeTimer { _ in
                let rc = b.cancelSync()
                results.update { $0.append((rc, Time.monotonic())) }
            }
            let now = Time.monotonic()
            try #require(b.armRepeating(start: now + Time.ms, period: period) == 0)
            try #require(a.armOnce(at: now + 10 * Time.ms) == 0)
            guard results.wait(until: { !$0.isEmpty }) else {
                Issue.record("cancel_sync of another timer from a callback did not return (deadlock)")
                engine.markDestroyed()
                return
            }
            let returned = results.read { $0[0] }
            #expect(returned.rc == 0)
            #expect(
                !engine.log.wait(timeoutNs: 10 * period) { log in
                    log.firings.contains { $0.probe == b.index && $0.startNs > returned.returnedNs }
                }, "B fired after A cancelled it")
            // B was live until then: its deadline 9 ms in passed before A's, and an earlier
            // key fires first, so B fired for it, in a tick of its own or merged into a late
            // one (a count of firings would depend on how late the machine ran).
            let reached = engine.firings.filter { $0.probe == b.index }.map(\.sequence).max()
            #expect((reached ?? 0) >= 8, "B did not fire up to A's deadline")
            engine.destroyAndExpectAllReleasedOnce()
        }

        // MARK: Re-arm

        /// Re-armed earlier: fires once at the new deadline; the old one never fires.
        @Test func rearmEarlierFiresOnceAtTheNewDeadline() throws {
            let (engine, probe) = try Engine.withTimer()
            let now = Time.monotonic()
            try #require(probe.armOnce(at: now + 50 * Time.ms) == 0)
            let deadline = now + 10 * Time.ms
            try #require(probe.armOnce(at: deadline) == 0)
            #expect(engine.waitFirings(1))
            // Past the old deadline, twice over.
            #expect(!engine.log.wait(timeoutNs: now + 100 * Time.ms - Time.monotonic()) { $0.firings.count > 1 })
            #expect(engine.firings.map(\.scheduled) == [deadline])
            expectNeverEarly(engine.firings)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// Re-armed later: nothing at the old deadline, one firing at the new one.
        @Test func rearmLaterDoesNotFireAtTheOldDeadline() throws {
            try retryingSpoiledTrials(upTo: 5) {
                let (engine, probe) = try Engine.withTimer()
                let now = Time.monotonic()
                let replaced = now + 10 * Time.ms
                try #require(probe.armOnce(at: replaced) == 0)
                let deadline = now + 80 * Time.ms
                try #require(probe.armOnce(at: deadline) == 0)
                // A stall that reached the replaced deadline before the re-arm did would make
                // its firing right, not wrong: the test then knows nothing about it.
                guard Time.monotonic() < replaced else {
                    return .spoiled("the machine stalled past the replaced deadline")
                }
                // A firing for the replaced deadline carries it, or comes before the new one:
                // both are checked below, on what fired rather than on when the test looked.
                #expect(engine.waitFirings(1))
                #expect(!engine.log.wait(timeoutNs: 20 * Time.ms) { $0.firings.count > 1 })
                let firings = engine.firings
                #expect(firings.map(\.scheduled) == [deadline])
                expectNeverEarly(firings)
                engine.destroyAndExpectAllReleasedOnce()
                return .counted
            }
        }

        /// A one-shot that re-arms itself from its callback fires for each new deadline.
        @Test func rearmFromItsOwnCallback() throws {
            let engine = try Engine()
            let results = Monitor([Int32]())
            let probe = try engine.makeTimer { callback in
                guard callback.probe.fires.load(ordering: .relaxed) < 4 else { return }
                let rc = callback.probe.armOnce(at: callback.tick.scheduled_ns + 3 * Time.ms)
                results.update { $0.append(rc) }
            }
            let first = Time.monotonic() + 2 * Time.ms
            try #require(probe.armOnce(at: first) == 0)
            #expect(engine.waitFirings(4))
            #expect(!engine.log.wait(timeoutNs: 15 * Time.ms) { $0.firings.count > 4 })
            let firings = engine.firings
            #expect(firings.map(\.scheduled) == (0..<4).map { first + Int64($0) * 3 * Time.ms })
            #expect(results.read { $0 } == [0, 0, 0])
            expectNeverEarly(firings)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// Re-arming a running repeating schedule replaces it: the sequence restarts at 0
        /// on the new start, and no tick of the old schedule follows.
        @Test func rearmRepeatingRestartsTheSchedule() throws {
            let (engine, probe) = try Engine.withTimer()
            let period = 2 * Time.ms
            try #require(probe.armRepeating(start: Time.monotonic() + Time.ms, period: period) == 0)
            #expect(engine.waitFirings(5))
            let newStart = Time.monotonic() + 7 * Time.ms + Time.ms / 3
            try #require(probe.armRepeating(start: newStart, period: 3 * Time.ms) == 0)
            let replaced = Time.monotonic()
            #expect(engine.log.wait { $0.firings.contains { $0.scheduled >= newStart && $0.sequence >= 4 } })
            #expect(probe.cancelSync() == 0)
            let firings = engine.firings
            let old = firings.filter { $0.scheduled < newStart }
            let new = firings.filter { $0.scheduled >= newStart }
            #expect(old.allSatisfy { $0.fired < replaced }, "an old-schedule tick fired after the re-arm")
            expectScheduleContract(new, start: newStart, period: 3 * Time.ms)
            engine.destroyAndExpectAllReleasedOnce()
        }
    }
}
#endif
