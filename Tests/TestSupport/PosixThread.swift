import Glibc

/// A joinable pthread running a closure.
///
/// Measurement and test threads must be real kernel threads the process controls: load threads
/// are excluded from CPU accounting by kernel thread id, and the timerfd subject blocks each
/// thread in `read`, which would starve a Swift concurrency or Dispatch pool thread. Contract
/// tests use one as "another thread", neither the test's nor the engine's.
public struct PosixThread: Sendable {
    private let handle: pthread_t

    /// Starts a thread running `body`.
    ///
    /// - Parameter body: The thread's work; the thread ends when it returns.
    /// - Throws: ``SystemCallError`` if `pthread_create` fails (for example `EAGAIN` when the
    ///   thread limit is reached).
    public static func spawn(_ body: @escaping @Sendable () -> Void) throws(SystemCallError) -> PosixThread {
        let box = Unmanaged.passRetained(Box(body))
        var handle = pthread_t()
        let rc = pthread_create(
            &handle,
            nil,
            { argument in
                let box = Unmanaged<Box>.fromOpaque(argument!).takeRetainedValue()
                box.body()
                return nil
            },
            box.toOpaque()
        )
        guard rc == 0 else {
            box.release()
            throw SystemCallError(call: "pthread_create", code: rc)
        }
        return PosixThread(handle: handle)
    }

    /// Waits for the thread to finish. Call it exactly once.
    public func join() {
        pthread_join(self.handle, nil)
    }

    private final class Box {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
}
