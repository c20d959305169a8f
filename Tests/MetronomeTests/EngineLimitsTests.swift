#if Engine
import CMetronome
import Testing

@testable import Metronome

/// The limits the Swift layer checks a configuration against are the C core's own.
@Suite struct EngineLimitsTests {
    @Test func theLimitsAreTheCoresOwn() {
        #expect(EngineLimits.realtimePriority == Int(MTR_REALTIME_PRIORITY_MAX))
        #expect(EngineLimits.spinWindowNanoseconds == Int64(MTR_SPIN_MAX_NS))
        #expect(EngineLimits.shards == Int(MTR_SHARDS_MAX))
    }
}
#endif
