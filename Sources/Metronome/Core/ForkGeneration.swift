#if Engine
internal import CMetronome
#endif

/// The process's fork count, which lets a forked child leave alone a delivery that a thread
/// of its parent began (see `TimerState.deliveringInFork`, TimerCore.swift): the one place the timer layer
/// learns of forks. The count is the C core's, bumped in its fork handler. Without the
/// engine GCD fires every timer, and libdispatch does not run in a child forked without
/// exec, so no delivery carries over and every process reads generation 0.
enum ForkGeneration {
    /// Starts counting, from the first timer on, whatever its backend.
    static func watch() {
        #if Engine
        mtr_fork_watch()
        #endif
    }

    @inline(__always) static var current: UInt32 {
        #if Engine
        mtr_fork_generation()
        #else
        0
        #endif
    }
}
