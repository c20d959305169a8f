#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// What an engine's configuration is checked against, written once here for both builds, so
/// that a configuration valid with the engine is valid without it. The C core enforces its
/// own copy in CMetronome.h; `EngineLimitsTests` asks it and fails if the two differ.
enum EngineLimits {
    static let realtimePriority = 99
    static let spinWindowNanoseconds: Int64 = 1_000_000
    static let shards = 64
    /// The machine's CPUs as the core counts them, within what a `cpu_set_t` holds.
    static var cpus: Int { min(sysconf(Int32(_SC_NPROCESSORS_CONF)), 1024) }
}
