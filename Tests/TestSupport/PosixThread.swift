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
    /// - Parameters:
    ///   - configure: Sets the thread's attributes before it starts, such as the CPUs it may
    ///     run on from its first instruction; its error ends the spawn.
    ///   - body: The thread's work; the thread ends when it returns.
    /// - Throws: ``SystemCallError`` from `configure`, or if `pthread_create` fails (for
    ///   example `EAGAIN` when the thread limit is reached).
    public static func spawn(
        configuring configure: ((inout pthread_attr_t) throws(SystemCallError) -> Void)? = nil,
        _ body: @escaping @Sendable () -> Void
    ) throws(SystemCallError) -> PosixThread {
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        try configure?(&attributes)
        let box = Unmanaged.passRetained(Box(body))
        var handle = pthread_t()
        let rc = pthread_create(
            &handle,
            &attributes,
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
