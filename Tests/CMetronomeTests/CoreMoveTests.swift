#if Engine
// mtr_timer_move re-arms a timer under a new id, so that its owner can tell a callback of
// the old schedule that had already begun from the new schedule's without creating a timer.
import CMetronome
import Glibc
import MetronomeTestSupport
import Synchronization
import Testing

extension CoreContractTests {
    @Suite(.serialized, .tags(.realTime))
    struct Move {
        /// The new id names the timer from then on: its firings carry it, and the old id
        /// is stale.
        @Test func moveRenamesTheTimer() throws {
            let (engine, probe) = try Engine.withTimer()
            try #require(probe.armOnce(at: Time.monotonic() + Time.s) == 0)
            let old = probe.id
            let deadline = Time.monotonic() + 2 * Time.ms
            #expect(probe.move(at: deadline) == 0)
            #expect(probe.id != old && UInt32(truncatingIfNeeded: probe.id) == UInt32(truncatingIfNeeded: old))
            #expect(mtr_timer_cancel(engine.handle, old) == EINVAL, "the old id still names the timer")
            #expect(engine.waitFirings(1))
            #expect(engine.firings.map(\.timer) == [probe.id])
            expectNeverEarly(engine.firings)
            #expect(probe.destroy() == 0)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// A callback begun before the move carries the old id; one of the new schedule, the
        /// new. A destroy by the new id while the old callback runs waits for it to return
        /// before releasing the context.
        @Test func aCallbackBegunBeforeTheMoveKeepsTheOldId() throws {
            let engine = try Engine()
            let started = Gate()
            let proceed = Gate()
            let probe = try engine.makeTimer { callback in
                guard callback.firing == 0 else { return }
                started.open()
                proceed.pass()
            }
            let old = probe.id
            try #require(probe.armOnce(at: Time.monotonic()) == 0)
            try #require(started.pass())
            #expect(probe.move(at: Time.monotonic(), period: Time.ms) == 0)
            #expect(engine.waitFirings(1))
            proceed.open()
            #expect(engine.waitFirings(3))
            #expect(probe.destroy() == 0)
            let timers = engine.firings.map(\.timer)
            #expect(timers.first == old)
            #expect(timers.dropFirst().allSatisfy { $0 == probe.id })

            let holding = Gate()
            let release = Gate()
            let held = try engine.makeTimer { _ in
                holding.open()
                release.pass()
            }
            try #require(held.armOnce(at: Time.monotonic()) == 0)
            try #require(holding.pass())
            #expect(held.move(at: Time.monotonic() + Time.s) == 0)
            #expect(held.destroy() == 0)
            #expect(held.releases.load(ordering: .acquiring) == 0, "released while its callback runs")
            release.open()
            #expect(engine.waitAllReleased())
            engine.destroyAndExpectAllReleasedOnce()
        }

        @Test func badMovesAreRefusedAndChangeNothing() throws {
            let (engine, probe) = try Engine.withTimer()
            let id = probe.id
            let now = Time.monotonic()
            #expect(probe.move(at: now, period: -1) == EINVAL)
            #expect(probe.move(at: now, period: Time.ms, leeway: 2 * Time.ms) == EINVAL)
            #expect(probe.move(at: -1) == EINVAL)
            #expect(probe.move(at: .max, leeway: 1) == EOVERFLOW)
            #expect(probe.id == id)
            var moved: mtr_timer_id = 0
            #expect(mtr_timer_move(engine.handle, id &+ (1 << 33), .MTR_CLOCK_MONOTONIC, now, 0, 0, &moved) == EINVAL)
            engine.stop()
            #expect([EINVAL, ESHUTDOWN].contains(probe.move(at: now)))
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// A timer whose slot has no names left moves to a fresh slot with its schedule:
        /// the move succeeds under a new id, the old id is stale for good, and the timer
        /// fires once, at its new deadline.
        @Test func spentNamesMoveTheTimerToAFreshSlot() throws {
            let engine = try Engine()
            let first = try engine.makeTimer()
            #expect(first.destroy() == 0)
            #expect(mtr_engine_age_for_testing(engine.handle, 0, .max) == 0)
            let last = try engine.makeTimer()  // the slot's last generation
            try #require(UInt32(truncatingIfNeeded: last.id) == UInt32(truncatingIfNeeded: first.id))
            let id = last.id
            #expect(last.armOnce(at: Time.monotonic() + 3_600 * Time.s) == 0)
            #expect(last.move(at: Time.monotonic() + Time.s) == 0)
            #expect(UInt32(truncatingIfNeeded: last.id) != UInt32(truncatingIfNeeded: id), "not a fresh slot")
            #expect(mtr_timer_cancel(engine.handle, id) == EINVAL, "the spent id still names a timer")
            #expect(last.armOnce(at: Time.monotonic()) == 0)
            #expect(engine.waitFirings(1))
            #expect(last.destroy() == 0)
            engine.destroyAndExpectAllReleasedOnce()
        }
    }
}
#endif
