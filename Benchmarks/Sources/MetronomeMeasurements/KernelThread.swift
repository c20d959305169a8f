internal import CMeasurements

/// Kernel thread ids, the names `/proc/self/task` lists threads by.
public enum KernelThread {
    /// The calling thread's kernel thread id (`gettid`), which differs from its `pthread_t`.
    public static func currentID() -> Int32 {
        cmeasurements_gettid()
    }
}
