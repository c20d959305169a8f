#if Engine
// The standby (mtr_standby.c): while a callback of the firing thread is blocked past the
// overrun bound, the engine's other timers still fire; one that computes is left alone; a timer's callbacks never overlap; cancel_sync
// and destroy treat a callback the standby runs as they treat the firing thread's. Each test
// asserts an order (what fired while what ran) through gates, never a wall-clock bound; the
// lateness behind a blocked callback is printed, and measured by `metronome stress`.
import CMetronome
import Glibc
import Synchronization
import Testing

extension CoreContractTests {
    @Suite(.serialized, .tags(.realTime))
    struct Standby {
        /// A callback blocks until another timer, due 50 ms after it, has fired: only the
        /// standby can fire that one meanwhile. Without it the gate times out and the other
        /// timer fires after the block.
        @Test(arguments: [UInt32(1), 4])
        func aBlockedCallbackHoldsUpNoOtherTimer(shards: UInt32) throws {
            let engine = try Engine(shards: shards, standby: true)
            let unblock = Gate()
            let blocked = try engine.makeTimer { _ in _ = unblock.pass() }
            let other = try engine.makeTimer { _ in unblock.open() }
            let start = Time.monotonic()
            try #require(blocked.armOnce(at: start) == 0)
            try #require(other.armOnce(at: start + 50 * Time.ms) == 0)
            try #require(engine.waitFirings(2))
            _ = blocked.cancelSync()
            let firings = engine.firings
            let block = try #require(firings.first { $0.probe == blocked.index })
            let late = try #require(firings.first { $0.probe == other.index })
            #expect(late.startNs < block.endNs, "the other timer waited for the blocked callback")
            #expect(engine.counters.takeovers >= 1)
            print("behind a blocked callback, a timer fired \((late.fired - late.scheduled) / Time.us) µs late")
            expectNeverEarly(firings)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// A repeating timer whose first firing blocks (sleeps) for 20 periods while the standby
        /// holds the firing: its next firings wait for that callback, never run beside it,
        /// and keep to the schedule's missed-period rule.
        @Test func aTimersCallbacksNeverOverlap() throws {
            let engine = try Engine(standby: true)
            let inside = Atomic<Int>(0)
            let overlaps = Atomic<Int>(0)
            let blocked = Atomic<Bool>(false)
            let period = Time.ms
            let timer = try engine.makeTimer { _ in
                if inside.add(1, ordering: .sequentiallyConsistent).newValue > 1 {
                    overlaps.add(1, ordering: .relaxed)
                }
                // The first firing blocks, whatever its sequence (a late start skips some).
                if !blocked.exchange(true, ordering: .relaxed) { Time.sleep(20 * period) }
                inside.subtract(1, ordering: .sequentiallyConsistent)
            }
            // A second timer keeps the standby firing while the first blocks.
            let neighbour = try engine.makeTimer()
            let start = Time.monotonic()
            try #require(timer.armRepeating(start: start, period: period) == 0)
            try #require(neighbour.armRepeating(start: start, period: period) == 0)
            #expect(engine.log.wait { log in log.firings.filter { $0.probe == timer.index }.count >= 5 })
            _ = timer.cancelSync()
            _ = neighbour.cancelSync()
            let overlapped = overlaps.load(ordering: .relaxed)
            #expect(overlapped == 0)
            let ticks = engine.firings.filter { $0.probe == timer.index }
            let first = try #require(ticks.first)
            if ticks.count > 1 {
                #expect(ticks[1].startNs >= first.endNs, "a firing ran beside the blocked one")
                #expect(ticks[1].missed >= 1, "the block's skipped periods were not counted")
            }
            expectNeverEarly(ticks)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// A callback that blocks for about the overrun bound, again and again, so that the
        /// standby often decides to take over just as the callback it measured returns, with
        /// nothing else due: once nothing blocks, the firing thread fires again. A takeover
        /// made after that return would leave the firing with the standby for good (the
        /// thread takes it back only as a callback of its own ends, and only the holder
        /// starts callbacks), the firing thread waking in a loop with nothing it may fire.
        @Test func aTakeoverThatMeetsTheCallbacksEndLeavesTheFiringWithTheThread() throws {
            let engine = try Engine(standby: true)
            let firingThread = Atomic<UInt>(0)
            let quiet = Atomic<Bool>(false)
            let quietFirings = Atomic<Int>(0)
            let quietOnTheThread = Atomic<Int>(0)
            // Armed first, so its first firing is on the firing thread.
            let ticker = try engine.makeTimer { _ in
                let me = UInt(pthread_self())
                _ = firingThread.compareExchange(expected: 0, desired: me, ordering: .relaxed)
                guard quiet.load(ordering: .acquiring) else { return }
                quietFirings.add(1, ordering: .relaxed)
                if me == firingThread.load(ordering: .relaxed) { quietOnTheThread.add(1, ordering: .relaxed) }
            }
            try #require(ticker.armRepeating(start: Time.monotonic(), period: 3 * Time.ms) == 0)
            try #require(engine.waitFirings(1))
            // Ends within 50 µs either side of the bound (2 ms), then nothing of it is due for 8.
            let blocker = try engine.makeTimer { _ in
                Time.sleep(2 * Time.ms - 50 * Time.us + Int64.random(in: 0...100) * Time.us)
            }
            try #require(blocker.armRepeating(start: Time.monotonic(), period: 10 * Time.ms) == 0)
            let stressEnd = Time.monotonic() + 4_000 * Time.ms
            while engine.counters.takeovers < 150 && Time.monotonic() < stressEnd { Time.sleep(10 * Time.ms) }
            #expect(blocker.cancelSync() == 0)
            quiet.store(true, ordering: .releasing)
            let quietEnd = Time.monotonic() + Bounds.patienceNs
            while quietFirings.load(ordering: .relaxed) < 20 && Time.monotonic() < quietEnd { Time.sleep(Time.ms) }
            let firings = quietFirings.load(ordering: .relaxed)
            let onTheThread = quietOnTheThread.load(ordering: .relaxed)
            #expect(firings >= 20, "the ticker stopped firing")
            // A callback preempted past the bound may, rarely, still be taken over.
            #expect(onTheThread > firings / 2, "\(firings - onTheThread) of \(firings) firings ran on the standby")
            print("takeovers \(engine.counters.takeovers); once quiet, \(onTheThread) of \(firings) on the thread")
            #expect(ticker.cancelSync() == 0)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// A callback that computes past the bound is left to finish: the firing is not handed
        /// over, so the callbacks of a loaded machine still run one at a time, in key order.
        @Test func aComputingCallbackKeepsTheFiring() throws {
            let engine = try Engine(standby: true)
            let computing = try engine.makeTimer { _ in Time.spin(20 * Time.ms) }
            let other = try engine.makeTimer()
            let start = Time.monotonic()
            try #require(computing.armOnce(at: start) == 0)
            try #require(other.armOnce(at: start + 5 * Time.ms) == 0)
            try #require(engine.waitFirings(2))
            let firings = engine.firings
            let busy = try #require(firings.first { $0.probe == computing.index })
            let next = try #require(firings.first { $0.probe == other.index })
            #expect(next.startNs >= busy.endNs, "a callback ran beside one that computes")
            #expect(engine.counters.takeovers == 0)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// cancel_sync of a timer whose callback the standby runs waits for that callback,
        /// and its context is released once, after it.
        @Test func cancelSyncWaitsForACallbackOnTheStandby() throws {
            let engine = try Engine(standby: true)
            let releaseFirst = Gate()
            let inSecond = Gate()
            let releaseSecond = Gate()
            let secondDone = Atomic<Bool>(false)
            let first = try engine.makeTimer { _ in _ = releaseFirst.pass() }
            let second = try engine.makeTimer { _ in
                inSecond.open()
                _ = releaseSecond.pass()
                secondDone.store(true, ordering: .sequentiallyConsistent)
            }
            let start = Time.monotonic()
            try #require(first.armOnce(at: start) == 0)
            try #require(second.armOnce(at: start + 10 * Time.ms) == 0)
            try #require(inSecond.pass(), "the standby never ran the second callback")
            let opener = try PosixThread.spawn {
                Time.sleep(20 * Time.ms)
                releaseSecond.open()
            }
            #expect(second.cancelSync() == 0)
            let returnedAfter = secondDone.load(ordering: .sequentiallyConsistent)
            #expect(returnedAfter, "cancel_sync returned before the callback did")
            opener.join()
            releaseFirst.open()
            #expect(engine.counters.takeovers >= 1)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// The engine destroyed while both threads run callbacks: destroy waits for both,
        /// and every context is released once.
        @Test func destroyWaitsForTheStandbysCallback() throws {
            let engine = try Engine(standby: true)
            let releaseAll = Gate()
            let inSecond = Gate()
            let first = try engine.makeTimer { _ in _ = releaseAll.pass() }
            let second = try engine.makeTimer { _ in
                inSecond.open()
                _ = releaseAll.pass()
            }
            let start = Time.monotonic()
            try #require(first.armOnce(at: start) == 0)
            try #require(second.armOnce(at: start + 10 * Time.ms) == 0)
            try #require(inSecond.pass(), "the standby never ran the second callback")
            let opener = try PosixThread.spawn {
                Time.sleep(20 * Time.ms)
                releaseAll.open()
            }
            engine.destroyAndExpectAllReleasedOnce()
            opener.join()
        }
    }
}
#endif
