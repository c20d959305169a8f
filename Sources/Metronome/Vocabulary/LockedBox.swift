#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A value behind a pthread mutex: the library's lock for all but a timer's own state, whose
/// lock is a byte of its core (`TimerLock`).
///
/// Not `Synchronization.Mutex`, which ThreadSanitizer reports falsely on this toolchain.
/// NIO's `NIOLockedValueBox` pattern: one `ManagedBuffer` holds the value with the mutex
/// tail-allocated after it, at an address that never moves. Copies share the one buffer.
///
/// Lock order: an expiry set's lock, then a timer's (a byte of its core, `TimerLock`), then
/// either a lock of the timer's backend (for the engine, a C shard lock, which C never holds
/// while calling back into Swift) or a part of the table of what waits on busy timers. So a
/// timer arms and moves its backend's arming while holding its own lock, and no lock is
/// taken while holding one later in this order.
package struct LockedBox<Value>: @unchecked Sendable {
    private let buffer: LockedBuffer<Value>

    package init(_ value: Value) {
        self.buffer = LockedBuffer.make(value)
    }

    package func withLockedValue<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        try self.buffer.withLockedValue(body)
    }
}

/// The object behind ``LockedBox``.
final class LockedBuffer<Value>: ManagedBuffer<Value, pthread_mutex_t> {
    static func make(_ value: Value) -> LockedBuffer<Value> {
        let buffer = self.create(minimumCapacity: 1) { _ in value }
        buffer.withUnsafeMutablePointerToElements { mutex in
            mutex.initialize(to: pthread_mutex_t())
            pthread_mutex_init(mutex, nil)
        }
        // `create` returns the instance typed as `ManagedBuffer`.
        return unsafeDowncast(buffer, to: LockedBuffer<Value>.self)
    }

    deinit {
        self.withUnsafeMutablePointerToElements { mutex in
            pthread_mutex_destroy(mutex)
            mutex.deinitialize(count: 1)
        }
        // ManagedBuffer destroys the header (the value) itself.
    }

    func withLockedValue<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        try self.withLock { try body(&$0.pointee) }
    }

    /// Runs `body` holding the mutex, given the value's address, to reach only a part of it.
    func withLock<Result>(_ body: (UnsafeMutablePointer<Value>) throws -> Result) rethrows -> Result {
        try self.withUnsafeMutablePointers { value, mutex in
            pthread_mutex_lock(mutex)
            defer { pthread_mutex_unlock(mutex) }
            return try body(value)
        }
    }
}
