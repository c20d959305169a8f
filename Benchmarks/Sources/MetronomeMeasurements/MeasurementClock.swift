import Glibc

/// The clock a jitter run arms its deadlines on and reads its firings from, named as
/// cyclictest's `--clock` names them (plus boottime, which counts suspend).
public enum MeasurementClock: String, Codable, Sendable, CaseIterable {
    /// `CLOCK_MONOTONIC`.
    case monotonic
    /// `CLOCK_BOOTTIME`.
    case boottime
    /// `CLOCK_REALTIME`, which jumps when the time is set.
    case wall

    /// The `clockid_t`.
    public var id: clockid_t {
        switch self {
        case .monotonic: CLOCK_MONOTONIC
        case .boottime: CLOCK_BOOTTIME
        case .wall: CLOCK_REALTIME
        }
    }

    /// The C name, for notes.
    public var cName: String {
        switch self {
        case .monotonic: "CLOCK_MONOTONIC"
        case .boottime: "CLOCK_BOOTTIME"
        case .wall: "CLOCK_REALTIME"
        }
    }

    /// Now on this clock, in nanoseconds.
    @inline(__always)
    public func now() -> Int64 {
        var time = timespec()
        clock_gettime(self.id, &time)
        return Int64(time.tv_sec) &* 1_000_000_000 &+ Int64(time.tv_nsec)
    }
}
