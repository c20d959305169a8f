import Glibc

/// A value behind a pthread mutex, with a condition to wait on.
///
/// `Synchronization.Mutex` draws a false ThreadSanitizer report on Swift 6.3.1 (STYLE §7);
/// this is NIO's `NIOLockedValueBox` pattern. The mutex and condition live at stable heap
/// addresses, never inside a Swift property that could move.
package final class LockedBox<Value>: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var value: Value

    package init(_ value: Value) {
        self.value = value
        pthread_mutex_init(self.mutex, nil)
        pthread_cond_init(self.condition, nil)
    }

    deinit {
        pthread_cond_destroy(self.condition)
        pthread_mutex_destroy(self.mutex)
        self.condition.deallocate()
        self.mutex.deallocate()
    }

    package func withLockedValue<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(self.mutex)
        defer { pthread_mutex_unlock(self.mutex) }
        return try body(&self.value)
    }

    /// Blocks until `predicate` holds, re-checking whenever ``broadcast()`` is called.
    package func wait(until predicate: (Value) -> Bool) {
        pthread_mutex_lock(self.mutex)
        while !predicate(self.value) {
            pthread_cond_wait(self.condition, self.mutex)
        }
        pthread_mutex_unlock(self.mutex)
    }

    /// Wakes every ``wait(until:)``; call after changing what they wait for.
    package func broadcast() {
        pthread_mutex_lock(self.mutex)
        pthread_cond_broadcast(self.condition)
        pthread_mutex_unlock(self.mutex)
    }
}
