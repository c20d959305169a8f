import Glibc

/// Reads and waits on `CLOCK_MONOTONIC` in nanoseconds, the clock every measurement uses.
///
/// It is the clock timerfd arms against and the one `DispatchTime.uptimeNanoseconds` reads on
/// Linux, so deadlines and firing times from every backend compare directly. `ContinuousClock`
/// reads `CLOCK_BOOTTIME` on Linux and is deliberately not used.
public enum MonotonicTime {
    /// The current `CLOCK_MONOTONIC` time in nanoseconds.
    @inline(__always)
    public static func now() -> Int64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Int64(time.tv_sec) &* 1_000_000_000 &+ Int64(time.tv_nsec)
    }

    /// Sleeps at least `duration`, resuming after a signal: for a test that lets time pass to
    /// show that something does *not* happen, or a callback that simulates blocking work.
    public static func sleep(for duration: Duration) {
        let end = now() &+ duration.saturatingNanoseconds
        var remaining = end &- now()
        while remaining > 0 {
            var request = timespec(tv_sec: Int(remaining / 1_000_000_000), tv_nsec: Int(remaining % 1_000_000_000))
            nanosleep(&request, nil)
            remaining = end &- now()
        }
    }

    /// Busy-waits for `nanoseconds` without yielding the CPU.
    ///
    /// Simulates a handler that does work: sleeping would hand the CPU back and hide the cost
    /// the work imposes on the timers behind it.
    ///
    /// - Parameter nanoseconds: How long to spin; zero or negative returns at once.
    public static func spin(nanoseconds: Int64) {
        guard nanoseconds > 0 else { return }
        let end = now() &+ nanoseconds
        while now() < end {}
    }
}
