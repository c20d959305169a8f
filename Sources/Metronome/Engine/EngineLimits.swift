#if Engine
internal import CMetronome
#endif

/// What an engine's configuration is checked against: the C core's limits, and the same
/// values where the core is compiled out, so that a configuration valid in one build is
/// valid in the other. Keep the second list in step with CMetronome.h.
enum EngineLimits {
    #if Engine
    static let realtimePriority = Int(MTR_REALTIME_PRIORITY_MAX)
    static let spinWindowNanoseconds = Int64(MTR_SPIN_MAX_NS)
    static let shards = Int(MTR_SHARDS_MAX)
    #else
    static let realtimePriority = 99
    static let spinWindowNanoseconds: Int64 = 1_000_000
    static let shards = 64
    #endif
}
