import Glibc

/// Polls `condition` every millisecond until it holds or `timeout` passes.
///
/// For state that nobody signals when it changes, such as an engine's counters or a count of
/// live objects; state that handlers update belongs in a ``LockedCondition`` to wait on.
///
/// - Returns: Whether `condition` held.
public func eventually(timeout: Duration = .seconds(5), _ condition: () -> Bool) -> Bool {
    let giveUp = MonotonicTime.now() &+ timeout.saturatingNanoseconds
    while !condition() {
        guard MonotonicTime.now() <= giveUp else { return false }
        var pause = timespec(tv_sec: 0, tv_nsec: 1_000_000)
        nanosleep(&pause, nil)
    }
    return true
}

/// The same poll for async tests: the task sleeps between polls instead of blocking one of
/// the few threads that every task and every test share.
public func eventually(timeout: Duration = .seconds(5), _ condition: () -> Bool) async -> Bool {
    let giveUp = MonotonicTime.now() &+ timeout.saturatingNanoseconds
    while !condition() {
        guard MonotonicTime.now() <= giveUp else { return false }
        try? await Task.sleep(for: .milliseconds(1))
    }
    return true
}
