#if Engine
// Coalescing: timers with leeway share wake-ups, and each still fires inside its window.
import CMetronome
import Glibc
import Testing

extension CoreContractTests {
    @Suite(.serialized, .tags(.realTime))
    struct Coalescing {
        struct Run {
            var firings: [FiredTick]
            var deadlines: [Int64]
            var counters: mtr_counters
            /// The engine's wake-up count seen by each firing: one value per wake-up.
            var batches: Int
        }

        /// Arms 200 one-shots with deadlines spread over 100 ms and the given leeway, and
        /// waits for all of them. Each callback reads the wake-up counter, which only the
        /// firing thread advances between batches, so it names the callback's wake-up.
        /// Four threads in turn make the timers, so that on a sharded engine they fall into
        /// several shards.
        private func run(leeway: Int64, seed: UInt64, shards: UInt32) throws -> Run {
            let engine = try Engine(shards: shards)
            let wakeups = Monitor([Int: UInt64]())
            let made = Monitor([Probe]())
            for _ in 0..<4 {
                try PosixThread.spawn {
                    for _ in 0..<50 {
                        guard let probe = try? engine.makeTimer(Self.recordingItsWakeup(in: wakeups)) else { return }
                        made.update { $0.append(probe) }
                    }
                }.join()
            }
            let probes = made.read { $0 }
            try #require(probes.count == 200)
            var generator = SplitMix64(seed: seed)
            let base = Time.monotonic() + 20 * Time.ms
            var deadlines: [Int64] = []
            for probe in probes {
                let deadline = base + Int64.random(in: 0..<100 * Time.ms, using: &generator)
                deadlines.append(deadline)
                try #require(probe.armOnce(at: deadline, leeway: leeway) == 0)
            }
            if shards > 1 {
                let used = Set(probes.map { UInt32(truncatingIfNeeded: $0.id) >> 26 })
                #expect(used.count > 1, "every timer in one shard")
            }
            #expect(engine.waitFirings(200))
            #expect(wakeups.wait { $0.count == 200 })
            #expect(!engine.log.wait(timeoutNs: 2 * leeway + 10 * Time.ms) { $0.firings.count > 200 })
            let counters = engine.counters
            let firings = engine.firings
            let batches = Set(wakeups.read { $0.values }).count
            engine.destroyAndExpectAllReleasedOnce()
            return Run(firings: firings, deadlines: deadlines, counters: counters, batches: batches)
        }

        /// A callback that records, by firing, the engine's wake-up count, which only the
        /// firing thread advances between batches: equal values share a wake-up.
        private static func recordingItsWakeup(in wakeups: Monitor<[Int: UInt64]>) -> @Sendable (Callback) -> Void {
            { callback in
                var counters = mtr_counters()
                mtr_engine_get_counters(callback.engine.handle, &counters)
                wakeups.update { $0[callback.firing] = counters.wakeups }
            }
        }

        /// On a sharded engine too: a wake-up serves every shard, so the wake-ups stab the
        /// windows of all shards together.
        @Test(arguments: [UInt32(1), 4])
        func leewayCoalescesWakeupsInsideEveryWindow(shards: UInt32) throws {
            let leeway = 20 * Time.ms
            let coalesced = try run(leeway: leeway, seed: 0xC0A1, shards: shards)
            let exact = try run(leeway: 0, seed: 0xC0A1, shards: shards)

            for (run, window) in [(coalesced, leeway), (exact, Int64(0))] {
                #expect(run.firings.count == 200)
                #expect(Set(run.firings.map(\.probe)).count == 200, "a timer fired twice")
                for firing in run.firings {
                    #expect(firing.scheduled == run.deadlines[firing.probe])
                }
                expectNeverEarly(run.firings)
                // Each firing after the first of its wake-up counts as coalesced.
                #expect(run.counters.fired == 200)
                let late = run.firings.filter { $0.fired - ($0.scheduled + window) > Time.ms }.count
                #expect(run.counters.late == UInt64(late), "late counter disagrees with the ticks")
                #expect(
                    run.counters.coalesced == run.counters.fired - UInt64(run.batches),
                    "coalesced \(run.counters.coalesced), \(run.batches) wake-ups fired something")
                #expect(UInt64(run.batches) <= run.counters.wakeups)
                // The wake-ups stay ahead of greedy stabbing over the windows the engine
                // aims at: each shortened by its wake-up margin, a quarter of the leeway up
                // to 1 ms. A late wake-up only covers more windows at once.
                let leeway = window - min(window / 4, Time.ms)
                let fewest = StabbingOptimum.minimumPoints(run.deadlines.map { $0...($0 + leeway) })
                #expect(run.batches <= fewest, "\(run.batches) wake-ups fired; \(fewest) would do")
            }
            #expect(coalesced.counters.coalesced > 0)
            #expect(coalesced.counters.wakeups < 50, "\(coalesced.counters.wakeups) wake-ups for 200 timers")
            #expect(
                coalesced.counters.wakeups < exact.counters.wakeups,
                "leeway: \(coalesced.counters.wakeups) wake-ups; none: \(exact.counters.wakeups)")
        }

        /// A timer whose window opened behind an unopened one in key order is not lost: it
        /// fires at the next wake-up, still inside its window.
        @Test func windowBehindAnUnopenedOneFiresAtTheNextWakeup() throws {
            let engine = try Engine()
            let wakeups = Monitor([Int: UInt64]())
            let base = Time.monotonic() + 10 * Time.ms
            // p [base, +5 ms] wakes first. q [+15, +16 ms] is next in key order but not open
            // then; r [+1, +40 ms] is open but keyed behind q, so it waits for q's wake-up.
            let p = try engine.makeTimer(Self.recordingItsWakeup(in: wakeups))
            let q = try engine.makeTimer(Self.recordingItsWakeup(in: wakeups))
            let r = try engine.makeTimer(Self.recordingItsWakeup(in: wakeups))
            try #require(p.armOnce(at: base, leeway: 5 * Time.ms) == 0)
            try #require(q.armOnce(at: base + 15 * Time.ms, leeway: Time.ms) == 0)
            try #require(r.armOnce(at: base + Time.ms, leeway: 39 * Time.ms) == 0)
            #expect(engine.waitFirings(3))
            #expect(wakeups.wait { $0.count == 3 })
            let firings = engine.firings
            #expect(firings.map(\.probe) == [p.index, q.index, r.index], "not in key order")
            expectNeverEarly(firings)
            // r never fires in a wake-up of its own: p's serves r only if the firing thread
            // was held up past q's opening (then all three share it), and otherwise q's
            // serves q and r. Every firing after the first of its wake-up is coalesced.
            let seen = wakeups.read { $0 }
            #expect(seen[2] == seen[1], "r did not share q's wake-up")
            let batches = Set(seen.values).count
            #expect(engine.counters.coalesced == UInt64(3 - batches), "\(batches) wake-ups fired")
            engine.destroyAndExpectAllReleasedOnce()
        }
    }
}
#endif
