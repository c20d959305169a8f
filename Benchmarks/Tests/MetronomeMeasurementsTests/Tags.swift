import Testing

extension Tag {
    /// Tests that run real timers against the wall clock; slower, and sensitive to machine load.
    @Tag static var realTime: Self
}

/// Every real-time suite nests in here, so they run one at a time: two suites measuring timers
/// and CPU time at once on a 2-core machine would disturb each other.
@Suite(.serialized, .tags(.realTime))
enum RealTime {}
