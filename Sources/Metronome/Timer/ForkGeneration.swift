#if !Engine
// Stand-ins for the C core's fork count, under its names so that ``TimerCore`` reads the
// same in both builds. The count lets a forked child leave alone a delivery that a thread
// of its parent began. Without the engine, GCD fires every timer, and libdispatch does not
// run in a child forked without exec, so no delivery carries over and every process can
// read generation 0.

/// Nothing to watch without the engine.
// swift-format-ignore: AlwaysUseLowerCamelCase
func mtr_fork_watch() {}

/// Always 0 without the engine.
// swift-format-ignore: AlwaysUseLowerCamelCase
@inline(__always)
func mtr_fork_generation() -> UInt32 { 0 }
#endif
