#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The clock a timer's deadlines are measured on.
public enum TimerClock: Sendable, Hashable, CaseIterable {
    /// `CLOCK_MONOTONIC`: stops while the machine is suspended; the clock of `DispatchTime`.
    case monotonic
    /// `CLOCK_BOOTTIME`: keeps counting through suspend, like `ContinuousClock` on Linux.
    case boottime
    /// `CLOCK_REALTIME`: wall time. When the wall clock is set, the engine notices and
    /// re-evaluates every wall timer.
    case wall

    /// The current time on this clock.
    public func now() -> TimerInstant {
        TimerInstant(nanoseconds: self.nanosecondsNow, clock: self)
    }

    /// The current time on this clock, in nanoseconds since its epoch.
    var nanosecondsNow: Int64 {
        var time = timespec()
        // Cannot fail: every case maps to a clock the system has.
        _ = clock_gettime(self.posixClock, &time)
        return Int64(time.tv_sec) * nanosecondsPerSecond + Int64(time.tv_nsec)
    }

    /// The clock's place in the order of instants with equal nanoseconds.
    var rank: Int {
        switch self {
        case .monotonic: 0
        case .boottime: 1
        case .wall: 2
        }
    }

    /// The POSIX clock of the same name, which the engine's timerfds use too. Darwin names
    /// them otherwise: its `CLOCK_MONOTONIC` counts through sleep, and `DispatchTime` is
    /// on `CLOCK_UPTIME_RAW`.
    private var posixClock: clockid_t {
        switch self {
        #if canImport(Darwin)
        case .monotonic: CLOCK_UPTIME_RAW
        case .boottime: CLOCK_MONOTONIC
        #else
        case .monotonic: CLOCK_MONOTONIC
        case .boottime: CLOCK_BOOTTIME
        #endif
        case .wall: CLOCK_REALTIME
        }
    }
}
