#if Engine
// What a late firing of a repeating timer does with the deadlines it passed, per policy
// (mtr_missed_policy, mtr_fire.c): skip them and count them, fire each back to back, or move
// the schedule a period past the late firing. The first callback holds the firing thread for
// three and a half periods; load only makes it later, which no assertion below minds.
import CMetronome
import Glibc
import Synchronization
import Testing

extension CoreContractTests {
    @Suite(.serialized, .tags(.realTime))
    struct MissedPolicy {
        static let period = 10 * Time.ms

        /// A repeating timer from `start` whose first callback blocks for 3.5 periods, then
        /// the firings until one comes `period` after the block or later.
        static func firings(_ policy: mtr_missed_policy) throws -> (start: Int64, ticks: [FiredTick]) {
            let engine = try Engine()
            let blocked = Atomic<Bool>(false)
            let timer = try engine.makeTimer { _ in
                // The first firing blocks, whatever its sequence (a late start may skip).
                if !blocked.exchange(true, ordering: .relaxed) { Time.spin(7 * Self.period / 2) }
            }
            let start = Time.monotonic() + 5 * Time.ms
            try #require(timer.repeating(start: start, period: Self.period, policy: policy) == 0)
            try #require(engine.waitFirings(7))
            _ = timer.cancelSync()
            let ticks = engine.firings
            engine.destroyAndExpectAllReleasedOnce()
            expectNeverEarly(ticks)
            return (start, ticks)
        }

        /// Skip: the firing after the block stands for the latest deadline passed, reports the
        /// ones it skipped, and the schedule goes on on the grid.
        @Test func skipFiresOnceAndCountsWhatItSkipped() throws {
            let (start, ticks) = try Self.firings(.MTR_MISSED_SKIP)
            let late = ticks[1]
            #expect(late.missed >= 2, "the block passed at least two deadlines")
            #expect(late.sequence == ticks[0].sequence + 1 + late.missed)
            #expect(late.scheduled == start + Int64(late.sequence) * Self.period)
            for (before, after) in zip(ticks.dropFirst(), ticks.dropFirst(2)) {
                #expect(after.sequence == before.sequence + after.missed + 1)
                #expect(after.scheduled == start + Int64(after.sequence) * Self.period, "off the grid")
            }
        }

        /// Burst: every deadline passed fires, in order, none reported missed, on the grid.
        @Test func burstFiresEveryDeadlineItPassed() throws {
            let (start, ticks) = try Self.firings(.MTR_MISSED_BURST)
            for (index, tick) in ticks.enumerated() {
                #expect(tick.missed == 0)
                #expect(tick.sequence == UInt64(index))
                #expect(tick.scheduled == start + Int64(index) * Self.period, "a deadline skipped or moved")
            }
        }

        /// Delay: a firing a period or more after its deadline moves the schedule, so that the
        /// next deadline is a full period after it; a less late one keeps it. Which firings
        /// were that late depends on the load, the rule does not; the one after the block
        /// always is.
        @Test func delayMovesTheScheduleAPeriodPastALateFiring() throws {
            let (start, ticks) = try Self.firings(.MTR_MISSED_DELAY)
            #expect(ticks[0].scheduled == start)
            #expect(ticks[1].fired - ticks[1].scheduled >= Self.period, "the block made no late firing")
            for (before, after) in zip(ticks, ticks.dropFirst()) {
                let late = before.fired - before.scheduled >= Self.period
                #expect(after.scheduled == (late ? before.fired : before.scheduled) + Self.period)
                #expect(after.missed == 0)
                #expect(after.sequence == before.sequence + 1)
            }
        }

        /// A policy outside the three is refused, and the timer keeps its schedule.
        @Test func anUnknownPolicyIsRefused() throws {
            let (engine, timer) = try Engine.withTimer()
            let bad = unsafeBitCast(UInt32(3), to: mtr_missed_policy.self)
            #expect(timer.repeating(start: Time.monotonic(), period: Self.period, policy: bad) == EINVAL)
            #expect(engine.counters.armed == 0)
            engine.destroyAndExpectAllReleasedOnce()
        }
    }
}
#endif
