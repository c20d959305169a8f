#if Engine
// Bad input to the C core: every call answers a positive errno, writes no result, and
// leaves the engine and its timers as they were.
import CMetronome
import Glibc
import Testing

extension CoreContractTests {
    @Suite(.serialized)
    struct BadInput {
        private static let noop: mtr_fire_fn = { _, _ in }

        private static func config(_ edit: (inout mtr_engine_config) -> Void) -> mtr_engine_config {
            var config = mtr_engine_config()
            mtr_engine_config_init(&config)
            config.on_fire = noop
            edit(&config)
            return config
        }

        /// A configuration that create must refuse, with the field that makes it wrong and
        /// the setting the check names for it.
        struct BadConfig: CustomTestStringConvertible, Sendable {
            let name: String
            let setting: mtr_engine_setting
            let edit: @Sendable (inout mtr_engine_config) -> Void
            var testDescription: String { name }
        }

        static let badConfigs: [BadConfig] = [
            BadConfig(name: "NULL on_fire", setting: .MTR_SETTING_ON_FIRE) { $0.on_fire = nil },
            BadConfig(name: "priority 100", setting: .MTR_SETTING_REALTIME_PRIORITY) { $0.realtime_priority = 100 },
            BadConfig(name: "priority -1", setting: .MTR_SETTING_REALTIME_PRIORITY) { $0.realtime_priority = -1 },
            BadConfig(name: "cpu 100000", setting: .MTR_SETTING_CPU) { $0.cpu = 100_000 },
            BadConfig(name: "cpu -2", setting: .MTR_SETTING_CPU) { $0.cpu = -2 },
            BadConfig(name: "negative spin", setting: .MTR_SETTING_SPIN) { $0.spin_ns = -1 },
            // 0 is no default: mtr_engine_config_init sets one.
            BadConfig(name: "zero late threshold", setting: .MTR_SETTING_LATE_THRESHOLD) { $0.late_threshold_ns = 0 },
            BadConfig(name: "negative late threshold", setting: .MTR_SETTING_LATE_THRESHOLD) {
                $0.late_threshold_ns = -1
            },
            BadConfig(name: "65 shards", setting: .MTR_SETTING_SHARDS) { $0.shards = 65 },
            BadConfig(name: "UInt32.max shards", setting: .MTR_SETTING_SHARDS) { $0.shards = .max },
        ]

        @Test(arguments: badConfigs)
        func createRefusesABadConfig(_ bad: BadConfig) {
            var config = Self.config(bad.edit)
            var setting = mtr_engine_setting.MTR_SETTING_NONE
            #expect(mtr_engine_config_check(&config, &setting) == EINVAL)
            #expect(setting == bad.setting)
            let sentinel = OpaquePointer(bitPattern: 0xDEAD)
            var engine: OpaquePointer? = sentinel
            #expect(mtr_engine_create(&config, &engine) == EINVAL)
            #expect(engine == sentinel, "the out-parameter was written on failure")
        }

        @Test func configInitGivesTheDocumentedDefaults() {
            var config = mtr_engine_config()
            config.cpu = 7
            config.spin_ns = 5
            config.shards = 3
            mtr_engine_config_init(&config)
            #expect(config.on_fire == nil && config.on_release == nil)
            #expect(config.realtime_priority == 0)
            #expect(config.cpu == -1)
            #expect(config.spin_ns == 0)
            #expect(config.late_threshold_ns == 1_000_000)
            #expect(config.shards == 0)
        }

        /// on_release is optional, and destroy(NULL) is a no-op.
        @Test func minimalEngineAndNullDestroy() throws {
            var config = Self.config { _ in }
            var engine: OpaquePointer?
            try #require(mtr_engine_create(&config, &engine) == 0)
            let handle = try #require(engine)
            var id: mtr_timer_id = 0
            #expect(mtr_timer_create(handle, nil, &id) == 0)
            #expect(mtr_timer_arm_once(handle, id, .MTR_CLOCK_MONOTONIC, Int64.max, 0) == 0)
            mtr_engine_destroy(handle)
            mtr_engine_destroy(nil)
        }

        @Test func armRepeatingRefusesBadSchedules() throws {
            let (engine, probe) = try Engine.withTimer()
            let start = Time.monotonic() + 3_600 * Time.s
            #expect(probe.armRepeating(start: start, period: 0) == EINVAL)
            #expect(probe.armRepeating(start: start, period: -Time.ms) == EINVAL)
            #expect(probe.armRepeating(start: start, period: Time.ms, leeway: Time.ms + 1) == EINVAL)
            #expect(probe.armRepeating(start: -1, period: Time.ms) == EINVAL)
            #expect(probe.armRepeating(start: start, period: Time.ms, leeway: -1) == EINVAL)
            #expect(probe.armRepeating(start: Int64.max - 10, period: Time.ms, leeway: 11) == EOVERFLOW)
            // The edges that are allowed.
            #expect(probe.armRepeating(start: start, period: Time.ms, leeway: Time.ms) == 0)
            #expect(probe.armRepeating(start: Int64.max - 10, period: Time.ms, leeway: 10) == 0)
            #expect(probe.cancel() == 0)
            engine.destroyAndExpectAllReleasedOnce()
        }

        @Test func armOnceRefusesBadDeadlines() throws {
            let (engine, probe) = try Engine.withTimer()
            #expect(probe.armOnce(at: -1) == EINVAL)
            #expect(probe.armOnce(at: Int64.min) == EINVAL)
            #expect(probe.armOnce(at: Time.monotonic(), leeway: -1) == EINVAL)
            #expect(probe.armOnce(at: Int64.max, leeway: 1) == EOVERFLOW)
            #expect(probe.armOnce(at: Int64.max - Time.s, leeway: Time.s + 1) == EOVERFLOW)
            #expect(probe.armOnce(at: 1, leeway: Int64.max) == EOVERFLOW)
            #expect(probe.armOnce(at: Int64.max, leeway: 0) == 0)
            #expect(probe.armOnce(at: 0, leeway: Int64.max) == 0)
            #expect(probe.cancel() == 0)
            #expect(engine.counters.armed == 0)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// A refused arm leaves the previous schedule in place.
        @Test(.tags(.realTime))
        func refusedArmKeepsThePreviousSchedule() throws {
            let (engine, probe) = try Engine.withTimer()
            let deadline = Time.monotonic() + 10 * Time.ms
            try #require(probe.armOnce(at: deadline) == 0)
            #expect(probe.armOnce(at: deadline + Time.ms, leeway: -1) == EINVAL)
            #expect(probe.armOnce(.unknown, at: deadline + Time.ms) == EINVAL)
            #expect(probe.armRepeating(start: deadline, period: 0) == EINVAL)
            #expect(probe.armOnce(at: Int64.max, leeway: 1) == EOVERFLOW)
            #expect(engine.counters.armed == 1)
            #expect(engine.waitFirings(1))
            #expect(engine.firings.first?.scheduled == deadline)
            engine.destroyAndExpectAllReleasedOnce()
        }

        @Test func unknownClockIsRefused() throws {
            var now: Int64 = 42
            #expect(mtr_clock_now(.unknown, &now) == EINVAL)
            #expect(now == 42, "the out-parameter was written on failure")
            let (engine, probe) = try Engine.withTimer()
            #expect(probe.armOnce(.unknown, at: 1) == EINVAL)
            #expect(probe.armRepeating(.unknown, start: 1, period: Time.ms) == EINVAL)
            #expect(mtr_engine_clock_changed(engine.handle, .unknown) == EINVAL)
            #expect(engine.counters.clock_steps == 0)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// mtr_clock_now reads the named clock: its value lies between two readings the test
        /// takes itself.
        @Test(arguments: mtr_clock_id.all)
        func clockNowReadsTheNamedClock(clock: mtr_clock_id) {
            let before = Time.now(clock)
            var now: Int64 = -1
            #expect(mtr_clock_now(clock, &now) == 0)
            let after = Time.now(clock)
            #expect(before <= now && now <= after)
        }

        @Test func unknownIdsAreRefused() throws {
            let engine = try Engine()
            let live = try engine.makeTimer()
            let index = UInt64(UInt32(truncatingIfNeeded: live.id))
            let generation = live.id >> 32
            var generator = SplitMix64(seed: 0x1D5)
            var ids: [mtr_timer_id] = [
                0,
                index,  // generation 0: a free slot's
                (generation + 1) << 32 | index,  // even: freed
                (generation + 2) << 32 | index,  // odd, but not this slot's
                generation << 32 | (index + 1),  // a slot never handed out
                generation << 32 | UInt64(UInt32.max),
                UInt64.max,
            ]
            for _ in 0..<64 { ids.append(generator.next()) }
            let far = Time.monotonic() + 3_600 * Time.s
            for id in ids where id != live.id {
                #expect(mtr_timer_arm_once(engine.handle, id, .MTR_CLOCK_MONOTONIC, far, 0) == EINVAL, "id \(id)")
                #expect(mtr_timer_arm_repeating(engine.handle, id, .MTR_CLOCK_MONOTONIC, far, Time.ms, 0) == EINVAL)
                #expect(mtr_timer_cancel(engine.handle, id) == EINVAL)
                #expect(mtr_timer_cancel_sync(engine.handle, id) == EINVAL)
                #expect(mtr_timer_destroy(engine.handle, id) == EINVAL)
            }
            // The live timer is untouched.
            #expect(engine.counters.timers == 1)
            #expect(live.releases.load(ordering: .acquiring) == 0)
            #expect(live.armOnce(at: far) == 0)
            engine.destroyAndExpectAllReleasedOnce()
        }
    }
}
#endif
