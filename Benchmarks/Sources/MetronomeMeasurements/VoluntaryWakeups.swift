internal import CMeasurements
import Glibc

/// Voluntary context switches: a count of thread wake-ups that works for every backend.
///
/// A thread switches out voluntarily when it blocks (in `epoll_wait`, `read`, a futex) and
/// wakes up once per switch, so the difference over a run approximates how often the process
/// woke up. Use it as wake-ups per second where a backend cannot count its own wake-ups. It
/// includes every thread of the process, and spinning ``BusyLoad`` threads add nothing.
public enum VoluntaryWakeups {
    /// `getrusage(RUSAGE_SELF).ru_nvcsw`: voluntary context switches of the process so far,
    /// including those of threads that have exited.
    public static func count() -> Int {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return usage.ru_nvcsw
    }

    /// `getrusage(RUSAGE_THREAD).ru_nvcsw`: voluntary context switches of the calling thread
    /// so far, or `nil` if the kernel refuses to say.
    ///
    /// Read on a backend's one firing thread before and after a run, the difference is that
    /// thread's own wake-ups, free of every other thread of the process.
    public static func countOfThisThread() -> Int? {
        var count = 0
        return cmeasurements_thread_voluntary_switches(&count) == 0 ? count : nil
    }
}
