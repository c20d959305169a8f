#if Engine
// A reschedule to a later deadline leaves the timer's heap entry at its old key and
// records the new one; the entry is re-keyed when the old key reaches the heap top or a
// batch take (mtr_queue.c, mtr_timerset.c, mtr_batch.c). These tests push timers later
// while their old keys come due, and check what the eager path guaranteed: never early,
// never lost, once per schedule, equal deadlines in arm order, nothing after a cancel.
import CMetronome
import Glibc
import Synchronization
import Testing

extension CoreContractTests {
    @Suite(.serialized, .tags(.realTime))
    struct LazyReschedule {
        /// Long enough that a deadline this far ahead is never reached while a test is
        /// still arming, even on a loaded or sanitized run.
        static let horizon = Bounds.sanitized ? 1_500 * Time.ms : 300 * Time.ms

        /// Timers pushed later again and again, by several threads at once, while their
        /// first keys come due and the firing thread re-keys them. Each thread ends by
        /// cancelling a fifth of its timers and moving another fifth earlier. Every timer
        /// left armed fires exactly once, at its last deadline and never early; none of the
        /// cancelled ones fires.
        @Test func concurrentLaterReschedulesFireOnceAtTheLastDeadline() throws {
            try retryingSpoiledTrials(upTo: 3) {
                let threads = 4
                let perThread = 500
                let engine = try Engine(expectedTimers: threads * perThread)
                let probes = try engine.makeTimers(threads * perThread)
                let start = Time.monotonic()
                var generator = SplitMix64(seed: 0x1A2E)
                var firsts: [Int64] = []
                for probe in probes {
                    // Due while the threads below push them later.
                    let first = start + Self.horizon / 4 + Int64.random(in: 0..<(Self.horizon / 4), using: &generator)
                    try #require(probe.armOnce(at: first) == 0)
                    firsts.append(first)
                }
                let failedCalls = Atomic<Int>(0)
                // Each timer's last deadline, or nil once cancelled.
                let finals = Monitor([Int64?](repeating: nil, count: probes.count))
                let pushUntil = start + Self.horizon / 2 + 20 * Time.ms
                let workers = try (0..<threads).map { thread in
                    try PosixThread.spawn {
                        let mine = probes[(thread * perThread)..<((thread + 1) * perThread)]
                        var generator = SplitMix64(seed: UInt64(thread) &+ 0x5EED)
                        var last = [Int64](repeating: 0, count: perThread)
                        // Each round moves every timer to now + horizon: later than its key.
                        while Time.monotonic() < pushUntil {
                            for (slot, probe) in mine.enumerated() {
                                let deadline =
                                    Time.monotonic() + Self.horizon
                                    + Int64.random(in: 0..<Time.ms, using: &generator)
                                if probe.armOnce(at: deadline) != 0 { failedCalls.add(1, ordering: .relaxed) }
                                last[slot] = deadline
                            }
                        }
                        for (slot, probe) in mine.enumerated() {
                            switch probe.index % 5 {
                            case 0:
                                if probe.cancel() != 0 { failedCalls.add(1, ordering: .relaxed) }
                                finals.update { $0[probe.index] = nil }
                            case 1:
                                let earlier = last[slot] - Self.horizon / 2
                                if probe.armOnce(at: earlier) != 0 { failedCalls.add(1, ordering: .relaxed) }
                                finals.update { $0[probe.index] = earlier }
                            default:
                                finals.update { $0[probe.index] = last[slot] }
                            }
                        }
                    }
                }
                for worker in workers { worker.join() }
                // A worker the machine held past a timer's first deadline let it fire there,
                // and the trial tests nothing it was made for.
                if engine.firings.contains(where: { $0.scheduled == firsts[$0.probe] }) {
                    return .spoiled("a timer's first deadline passed before a worker pushed it")
                }
                #expect(failedCalls.load(ordering: .relaxed) == 0)
                let deadlines = finals.read { $0 }
                let armed = deadlines.compactMap { $0 }

                #expect(engine.waitFirings(armed.count))
                let latest = try #require(armed.max())
                // Past the last deadline, and then some: a cancelled timer would have fired.
                #expect(
                    !engine.log.wait(timeoutNs: latest - Time.monotonic() + 50 * Time.ms) {
                        $0.firings.count > armed.count
                    })
                let firings = engine.firings
                #expect(Set(firings.map(\.probe)).count == firings.count, "a timer fired twice")
                let wrong = firings.filter { deadlines[$0.probe] != $0.scheduled }
                #expect(wrong.isEmpty, "\(wrong.count) firings off their last deadline: \(wrong.prefix(3))")
                expectNeverEarly(firings)
                #expect(engine.counters.armed == 0)
                engine.destroyAndExpectAllReleasedOnce()
                return .counted
            }
        }

        /// Timers moved, one by one in a shuffled order, to one shared deadline: from an
        /// earlier one (recorded, re-keyed later), from a later one (moved up in place),
        /// from the shared one itself (behind the equal keys armed before), or fresh. They
        /// fire in the order of those calls, not of their first arm, also when arm order
        /// is renumbered midway with keys still waiting to be re-keyed. 200 timers fire
        /// from the heap one by one; 2000 go through a batch take.
        @Test(arguments: [false, true], [200, 2000])
        func equalDeadlinesFireInTheOrderOfTheLastArm(renumberMidway: Bool, count: Int) throws {
            try retryingSpoiledTrials(upTo: 3) {
                let engine = try Engine(expectedTimers: count)
                let probes = try engine.makeTimers(count)
                let first = Time.monotonic() + Self.horizon
                let shared = first + Self.horizon / 4
                let moved = probes.filter { $0.index % 4 != 0 }
                for probe in moved {
                    let from = [Int64(0), first, shared + Self.horizon / 4, shared][probe.index % 4]
                    try #require(probe.armOnce(at: from) == 0)
                }
                var generator = SplitMix64(seed: 0x0DE4)
                let callOrder = probes.shuffled(using: &generator)
                if renumberMidway {
                    // Renumbering comes at 2^30 arms: let it fall in the middle of the calls.
                    let arms = (1 << 30) - UInt64(moved.count + count / 2)
                    try #require(mtr_engine_age_for_testing(engine.handle, arms, 0) == 0)
                }
                for probe in callOrder {
                    try #require(probe.armOnce(at: shared) == 0)
                }
                if Time.monotonic() >= first { return .spoiled("arming overran the lead") }

                #expect(engine.waitFirings(count))
                let firings = engine.firings
                #expect(firings.map(\.probe) == callOrder.map(\.index), "equal deadlines out of arm order")
                #expect(firings.allSatisfy { $0.scheduled == shared })
                expectNeverEarly(firings)
                engine.destroyAndExpectAllReleasedOnce()
                return .counted
            }
        }

        /// Cancel, cancel_sync and destroy after a lazy reschedule: nothing fires, neither
        /// at the old deadline nor at the new one.
        @Test func stopAfterLaterRescheduleNeverFires() throws {
            let engine = try Engine(expectedTimers: 30)
            let probes = try engine.makeTimers(30)
            let old = Time.monotonic() + 20 * Time.ms
            let new = old + 30 * Time.ms
            for probe in probes {
                try #require(probe.armOnce(at: old) == 0)
                try #require(probe.armOnce(at: new) == 0)
                switch probe.index % 3 {
                case 0: try #require(probe.cancel() == 0)
                case 1: try #require(probe.cancelSync() == 0)
                default: try #require(probe.destroy() == 0)
                }
            }
            #expect(!engine.log.wait(timeoutNs: new - Time.monotonic() + 50 * Time.ms) { !$0.firings.isEmpty })
            #expect(engine.counters.armed == 0)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// A timer moved later (lazily) and then earlier than its first deadline fires
        /// once, at the earlier deadline: the earlier move re-keys at once and moves the
        /// timerfd, which was set for the first deadline, far later than the test waits.
        @Test func earlierAfterLaterFiresAtTheEarlierDeadline() throws {
            let (engine, probe) = try Engine.withTimer()
            let now = Time.monotonic()
            try #require(probe.armOnce(at: now + 20 * Time.s) == 0)
            try #require(probe.armOnce(at: now + 40 * Time.s) == 0)
            let earlier = Time.monotonic() + 20 * Time.ms
            try #require(probe.armOnce(at: earlier) == 0)

            // The test's patience ends long before the first deadline the timerfd was set for.
            #expect(engine.waitFirings(1))
            let firings = engine.firings
            #expect(firings.map(\.scheduled) == [earlier])
            expectNeverEarly(firings)
            #expect(engine.counters.armed == 0)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// A repeating timer moved later keeps nothing of its old schedule: it fires at the
        /// new start, with sequence 0, and then on the new period.
        @Test func repeatingMovedLaterStartsItsNewSchedule() throws {
            let (engine, probe) = try Engine.withTimer()
            let start = Time.monotonic() + 10 * Time.ms
            try #require(probe.armRepeating(start: start, period: 5 * Time.ms) == 0)
            let later = start + 40 * Time.ms
            try #require(probe.armRepeating(start: later, period: 7 * Time.ms) == 0)

            #expect(engine.waitFirings(3))
            _ = probe.cancelSync()
            let firings = Array(engine.firings.prefix(3))
            #expect(firings.allSatisfy { $0.scheduled >= later })
            #expect(firings.map(\.sequence) == firings.map { UInt64(($0.scheduled - later) / (7 * Time.ms)) })
            #expect(firings.allSatisfy { ($0.scheduled - later) % (7 * Time.ms) == 0 })
            expectNeverEarly(firings)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// A burst whose firing thread was held while every old key passed: half the timers
        /// were moved later meanwhile, some still into the past. The batch take re-keys
        /// those and leaves them in the heap; the past ones fire merged with the batch in
        /// deadline order, the future ones once at their new deadline, none early.
        @Test func aBatchTakeReKeysLaggingEntries() throws {
            let (engine, probes, release) = try Batch.heldEngine()
            var generator = SplitMix64(seed: 0xBA7C)
            let now = Time.monotonic()
            var deadlines = [Int64](repeating: 0, count: probes.count)
            for probe in probes {
                deadlines[probe.index] = now - 100 * Time.ms + Int64.random(in: 0..<(50 * Time.ms), using: &generator)
                try #require(probe.armOnce(at: deadlines[probe.index]) == 0)
            }
            let future = Time.monotonic() + Self.horizon
            for probe in probes where probe.index % 2 == 0 {
                // Later in both cases; the first stays in the past.
                deadlines[probe.index] =
                    probe.index % 4 == 0
                    ? deadlines[probe.index] + 50 * Time.ms
                    : future + Int64.random(in: 0..<(10 * Time.ms), using: &generator)
                try #require(probe.armOnce(at: deadlines[probe.index]) == 0)
            }
            release.open()

            #expect(engine.waitFirings(probes.count + 1))
            #expect(!engine.log.wait(timeoutNs: 20 * Time.ms) { $0.firings.count > probes.count + 1 })
            let firings = engine.firings.dropFirst().filter { $0.probe < probes.count }
            #expect(firings.count == probes.count)
            #expect(Set(firings.map(\.probe)).count == probes.count, "a timer fired twice or never")
            #expect(firings.allSatisfy { $0.scheduled == deadlines[$0.probe] })
            expectNeverEarly(Array(firings))
            let pastOnes = firings.filter { $0.scheduled < now }.map(\.scheduled)
            #expect(pastOnes == pastOnes.sorted(), "the past deadlines fired out of order")
            #expect(engine.counters.batched > 0, "the burst did not go through the batch")
            #expect(engine.counters.armed == 0)
            engine.destroyAndExpectAllReleasedOnce()
        }
    }
}
#endif
