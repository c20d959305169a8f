#if Engine
// Arm order, which breaks ties between equal deadlines, never wraps and never has to be
// renumbered: a shard aged by any realistic number of arms still fires equal deadlines in the
// order they were armed, and ageing it past what 64 bits hold is refused.
import CMetronome
import Glibc
import Testing

extension CoreContractTests {
    @Suite(.serialized, .tags(.realTime))
    struct ArmOrder {
        /// Four timers armed for one deadline, with the shard aged between arms by 2^40 and
        /// 2^62 arms (a 32-bit order would have wrapped many times over): they fire in the
        /// order they were armed, and the ageing itself takes no time per arm skipped.
        @Test(arguments: [UInt32(1), 2])
        func equalDeadlinesFireInArmOrderHoweverOldTheShard(shards: UInt32) throws {
            let engine = try Engine(shards: shards)
            let probes = try engine.makeTimers(4)
            let deadline = Time.monotonic() + 50 * Time.ms
            try #require(probes[0].armOnce(at: deadline) == 0)
            #expect(mtr_engine_age_for_testing(engine.handle, 1 << 40, 0) == 0)
            try #require(probes[1].armOnce(at: deadline) == 0)
            #expect(mtr_engine_age_for_testing(engine.handle, 1 << 62, 0) == 0)
            try #require(probes[2].armOnce(at: deadline) == 0)
            try #require(probes[3].armOnce(at: deadline) == 0)
            try #require(engine.waitFirings(4))
            #expect(engine.firings.map(\.probe) == probes.map(\.index))
            expectNeverEarly(engine.firings)
            engine.destroy()
        }

        /// Ageing by more arms than 63 bits hold is refused at once and changes nothing.
        @Test
        func ageingPastWhatTheOrderHoldsIsRefused() throws {
            let engine = try Engine()
            #expect(mtr_engine_age_for_testing(engine.handle, UInt64.max, 0) == EOVERFLOW)
            #expect(mtr_engine_age_for_testing(engine.handle, 1 << 63, 0) == EOVERFLOW)
            #expect(mtr_engine_age_for_testing(engine.handle, (1 << 63) - 1, UInt32.max) == 0)
            #expect(mtr_engine_age_for_testing(engine.handle, 1, 0) == EOVERFLOW)
            // The order is spent only for ageing: arms go on, and still in order.
            let probes = try engine.makeTimers(2)
            let deadline = Time.monotonic() + 10 * Time.ms
            try #require(probes[0].armOnce(at: deadline) == 0 && probes[1].armOnce(at: deadline) == 0)
            try #require(engine.waitFirings(2))
            #expect(engine.firings.map(\.probe) == probes.map(\.index))
            engine.destroy()
        }
    }
}
#endif
