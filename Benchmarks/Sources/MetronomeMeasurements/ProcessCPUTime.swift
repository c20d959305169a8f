import Glibc

/// CPU time (user + system) this process has used, optionally leaving some threads out.
///
/// Take it before and after a run and subtract: the difference is what the subject cost,
/// without the ``BusyLoad`` threads spinning beside it.
public enum ProcessCPUTime {
    /// CPU nanoseconds used by the whole process so far, minus those of the `excluded` threads.
    ///
    /// The process total comes from `CLOCK_PROCESS_CPUTIME_ID` rather than from summing
    /// `/proc/self/task/*/stat`: threads that have exited are gone from `/proc/self/task` but
    /// still count in the process total, and a subject that joins its threads before the
    /// second reading must still be charged for them. Only the excluded threads are read one
    /// by one, through ``threadNanoseconds(_:)``.
    ///
    /// - Parameter excluded: Kernel thread ids of this process to leave out; ids of threads
    ///   that have exited are ignored.
    public static func nanoseconds(excluding excluded: [Int32] = []) -> Int64 {
        var time = timespec()
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time)
        let total = Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
        return total - excluded.reduce(0) { $0 + (threadNanoseconds($1) ?? 0) }
    }

    /// CPU nanoseconds used so far by one thread of this process, or `nil` if it has exited.
    ///
    /// Reads `/proc/self/task/<tid>/schedstat` (nanoseconds on the CPU), falling back to the
    /// `utime` and `stime` clock ticks of `/proc/self/task/<tid>/stat` on kernels built
    /// without scheduler statistics.
    ///
    /// - Parameter threadID: A kernel thread id, as ``KernelThread/currentID()`` returns.
    public static func threadNanoseconds(_ threadID: Int32) -> Int64? {
        if let schedstat = SystemFile.read("/proc/self/task/\(threadID)/schedstat"),
            let first = schedstat.split(separator: " ").first, let nanoseconds = Int64(first)
        {
            return nanoseconds
        }
        guard let stat = SystemFile.read("/proc/self/task/\(threadID)/stat"),
            let commandEnd = stat.lastIndex(of: ")")
        else { return nil }
        // The command name may contain spaces, so fields are counted after its closing
        // parenthesis: state is field 3, utime 14, stime 15.
        let fields = stat[stat.index(after: commandEnd)...].split(separator: " ")
        guard fields.count > 12, let user = Int64(fields[11]), let system = Int64(fields[12]) else { return nil }
        return (user + system) * 1_000_000_000 / Int64(sysconf(Int32(_SC_CLK_TCK)))
    }
}
