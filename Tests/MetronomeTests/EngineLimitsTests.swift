#if Engine
import CMetronome
import Testing

@testable import Metronome

/// The limits and rules the build without the C core checks a configuration against are the
/// core's own.
@Suite struct EngineLimitsTests {
    @Test func theLimitsAreTheCoresOwn() {
        #expect(EngineLimits.realtimePriority == Int(MTR_REALTIME_PRIORITY_MAX))
        #expect(EngineLimits.spinWindowNanoseconds == Int64(MTR_SPIN_MAX_NS))
        #expect(EngineLimits.shards == Int(MTR_SHARDS_MAX))
    }

    /// Each setting at, just inside and just past each end of its range, and at the
    /// extremes of its type: the core's check and the rules the GCD build applies refuse
    /// the same setting first.
    @Test func theRulesWithoutTheCoreAnswerAsTheCoreDoes() {
        typealias Configuration = TimerEngine.Configuration
        let cpus = EngineLimits.cpus
        let spin = EngineLimits.spinWindowNanoseconds
        var cases: [Configuration] = []
        for priority in [nil, Int.min, -1, 0, 1, 99, 100, Int.max] { cases.append(.init(realtimePriority: priority)) }
        for cpu in [nil, Int.min, -2, -1, 0, cpus - 1, cpus, 1024, Int.max] { cases.append(.init(cpu: cpu)) }
        for ns in [Int64.min, -1, 0, 1, spin, spin + 1, Int64.max] {
            cases.append(.init(spinWindow: .nanoseconds(ns)))
            cases.append(.init(lateThreshold: .nanoseconds(ns)))
        }
        cases.append(.init(spinWindow: .seconds(Int64.max)))
        cases.append(.init(lateThreshold: .seconds(Int64.max)))
        cases.append(.init(lateThreshold: .nanoseconds(0.5)))
        for shards in [Int.min, -1, 0, 1, 64, 65, Int.max] { cases.append(.init(shards: shards)) }
        cases.append(.init(realtimePriority: 0, cpu: -5, shards: 0))
        for configuration in cases {
            let rules = Configuration.Setting.allCases.first { !$0.admits(configuration) }
            #expect(rules == configuration.refusedSetting, "\(configuration)")
        }
    }
}
#endif
