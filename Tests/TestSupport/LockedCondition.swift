import Glibc

/// A value guarded by a pthread mutex, with a condition variable to wait for it to change.
///
/// Measurement and test threads (timer handlers, load threads) update shared state while the
/// measuring or testing thread waits for it to reach a target. `Synchronization.Mutex` would do, but on
/// Swift 6.3.1 it draws false "Swift access race" reports under TSan (an 8-task increment
/// test failed 3 of 3 runs; a pthread box ran clean), so this box
/// is the NIO `NIOLock` pattern with a condition variable added.
///
/// ```swift
/// let count = LockedCondition(0)
/// count.withLock { $0 += 1 }
/// count.broadcast()
/// let reached = count.wait(timeout: .seconds(1)) { $0 >= 1 }
/// ```
public final class LockedCondition<Value> {
    // Heap-allocated so the mutex and condition keep a stable address for their lifetime.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>
    private let storage: UnsafeMutablePointer<Value>

    /// Creates a box holding `value`.
    public init(_ value: Value) {
        self.mutex = .allocate(capacity: 1)
        self.condition = .allocate(capacity: 1)
        self.storage = .allocate(capacity: 1)
        self.storage.initialize(to: value)
        precondition(pthread_mutex_init(self.mutex, nil) == 0, "pthread_mutex_init failed")
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        // The default clock is CLOCK_REALTIME, which jumps when the wall clock is set;
        // timeouts must follow the clock every measurement uses.
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        precondition(pthread_cond_init(self.condition, &attributes) == 0, "pthread_cond_init failed")
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(self.condition)
        pthread_mutex_destroy(self.mutex)
        self.storage.deinitialize(count: 1)
        self.storage.deallocate()
        self.condition.deallocate()
        self.mutex.deallocate()
    }

    /// Runs `body` with exclusive access to the value.
    ///
    /// - Parameter body: Reads or changes the value. It must not call back into this box.
    /// - Returns: What `body` returns.
    public func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(self.mutex)
        defer { pthread_mutex_unlock(self.mutex) }
        return try body(&self.storage.pointee)
    }

    /// Runs `body` with exclusive access to the value, then wakes every waiter: ``withLock(_:)``
    /// followed by ``broadcast()``.
    @discardableResult
    public func update<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        defer { self.broadcast() }
        return try self.withLock(body)
    }

    /// Wakes every thread blocked in ``wait(timeout:until:)`` so it re-checks its predicate.
    ///
    /// Call it after a ``withLock(_:)`` that may have made a waiter's predicate true. It need
    /// not hold the lock: a waiter either saw the new value or is already waiting.
    public func broadcast() {
        pthread_cond_broadcast(self.condition)
    }

    /// Blocks until `predicate` holds for the value, or `timeout` has passed.
    ///
    /// - Parameters:
    ///   - timeout: The longest to wait, measured on `CLOCK_MONOTONIC`.
    ///   - predicate: Evaluated under the lock, first at once and then after every
    ///     ``broadcast()``.
    /// - Returns: `true` if the predicate held, `false` on timeout.
    public func wait(timeout: Duration, until predicate: (Value) -> Bool) -> Bool {
        let deadline = MonotonicTime.now() &+ max(0, timeout.saturatingNanoseconds)
        var limit = timespec(
            tv_sec: Int(deadline / 1_000_000_000),
            tv_nsec: Int(deadline % 1_000_000_000)
        )
        pthread_mutex_lock(self.mutex)
        defer { pthread_mutex_unlock(self.mutex) }
        while !predicate(self.storage.pointee) {
            if pthread_cond_timedwait(self.condition, self.mutex, &limit) == ETIMEDOUT {
                return predicate(self.storage.pointee)
            }
        }
        return true
    }
}

// Every access to `storage` goes through `mutex`.
extension LockedCondition: @unchecked Sendable where Value: Sendable {}
