import Glibc

/// A value behind a pthread mutex, with a condition to wait on.
///
/// `Synchronization.Mutex` draws a false ThreadSanitizer report on Swift 6.3.1 (an 8-task
/// increment test failed 3 of 3 runs under TSan; a pthread box ran clean);
/// this is NIO's `NIOLockedValueBox` pattern: a struct around one `ManagedBuffer` that
/// holds the value with the mutex and condition tail-allocated after it, at an address
/// that never moves. One allocation, and one cache line touched per locked access.
/// Copies share the one buffer.
package struct LockedBox<Value>: @unchecked Sendable {
    private struct Primitives {
        var mutex = pthread_mutex_t()
        var condition = pthread_cond_t()
    }

    private final class Storage: ManagedBuffer<Value, Primitives> {
        deinit {
            self.withUnsafeMutablePointerToElements { primitives in
                pthread_cond_destroy(&primitives.pointee.condition)
                pthread_mutex_destroy(&primitives.pointee.mutex)
                primitives.deinitialize(count: 1)
            }
            // ManagedBuffer destroys the header (the value) itself.
        }
    }

    private let storage: Storage

    package init(_ value: Value) {
        let buffer = Storage.create(minimumCapacity: 1) { _ in value }
        buffer.withUnsafeMutablePointerToElements { primitives in
            primitives.initialize(to: Primitives())
            pthread_mutex_init(&primitives.pointee.mutex, nil)
            pthread_cond_init(&primitives.pointee.condition, nil)
        }
        // `create` returns the base class type; the instance is our subclass.
        self.storage = unsafeDowncast(buffer, to: Storage.self)
    }

    package func withLockedValue<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        try self.storage.withUnsafeMutablePointers { value, primitives in
            pthread_mutex_lock(&primitives.pointee.mutex)
            defer { pthread_mutex_unlock(&primitives.pointee.mutex) }
            return try body(&value.pointee)
        }
    }

    /// Blocks until `predicate` holds, re-checking whenever ``broadcast()`` is called.
    package func wait(until predicate: (Value) -> Bool) {
        self.storage.withUnsafeMutablePointers { value, primitives in
            pthread_mutex_lock(&primitives.pointee.mutex)
            while !predicate(value.pointee) {
                pthread_cond_wait(&primitives.pointee.condition, &primitives.pointee.mutex)
            }
            pthread_mutex_unlock(&primitives.pointee.mutex)
        }
    }

    /// Wakes every ``wait(until:)``; call after changing what they wait for.
    package func broadcast() {
        self.storage.withUnsafeMutablePointerToElements { primitives in
            pthread_mutex_lock(&primitives.pointee.mutex)
            pthread_cond_broadcast(&primitives.pointee.condition)
            pthread_mutex_unlock(&primitives.pointee.mutex)
        }
    }
}
