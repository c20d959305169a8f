import Glibc

/// A joinable pthread running a closure.
///
/// Measurement threads must be real kernel threads the process controls: load threads are
/// excluded from CPU accounting by kernel thread id, and the timerfd subject blocks each thread
/// in `read`, which would starve a Swift concurrency or Dispatch pool thread.
public struct PosixThread: Sendable {
    private let handle: pthread_t

    /// Starts a thread running `body`.
    ///
    /// - Parameters:
    ///   - cpu: A CPU to run the thread on only, from its first instruction; `nil` for any.
    ///   - body: The thread's work; the thread ends when it returns.
    /// - Throws: ``MeasurementError/systemCall(_:code:)`` if `pthread_create` fails
    ///   (for example `EAGAIN` when the thread limit is reached, `EINVAL` for a CPU the
    ///   process may not use).
    public static func spawn(cpu: Int? = nil, _ body: @escaping @Sendable () -> Void) throws(MeasurementError)
        -> PosixThread
    {
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        if let cpu {
            let rc = CPUList.pin(&attributes, to: cpu)
            guard rc == 0 else { throw .systemCall("pthread_attr_setaffinity_np", code: rc) }
        }
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
            throw .systemCall("pthread_create", code: rc)
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
