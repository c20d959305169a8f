import NIOConcurrencyHelpers
import NIOCore

/// The Swift-concurrency shape on NIO: the work runs in the request's own task, and a
/// task scheduled on the connection's loop cancels that task at the deadline. No child
/// task, one timer, as ``MetronomeTaskDeadline``.
struct NIOTaskDeadline: TaskDeadline {
    func run<Result: Sendable>(
        within timeout: Duration, on loop: any EventLoop, _ work: @escaping @Sendable () async throws -> Result
    ) async throws -> Result {
        let canceller = withUnsafeCurrentTask { TaskCanceller($0) }
        let scheduled = loop.scheduleTask(in: TimeAmount(timeout)) { canceller.cancel() }
        defer {
            scheduled.cancel()
            canceller.release()
        }
        do {
            return try await work()
        } catch {
            if canceller.cancelled { throw DeadlineExceeded() }
            throw error
        }
    }

    /// The current task, cancellable from the loop until the work ends: both under one lock,
    /// so that a deadline passing as the work ends never touches a finished task.
    private final class TaskCanceller: @unchecked Sendable {
        private let lock = NIOLock()
        private var task: UnsafeCurrentTask?
        private var didCancel = false

        init(_ task: UnsafeCurrentTask?) {
            self.task = task
        }

        var cancelled: Bool { self.lock.withLock { self.didCancel } }

        func cancel() {
            self.lock.withLock {
                guard let task = self.task else { return }
                task.cancel()
                self.didCancel = true
            }
        }

        func release() {
            self.lock.withLock { self.task = nil }
        }
    }
}

/// The task-group idiom on NIO: the work races a task scheduled on the request's loop;
/// whichever finishes first decides, and the other is cancelled.
struct NIOGroupDeadline: TaskDeadline {
    func run<Result: Sendable>(
        within timeout: Duration, on loop: any EventLoop, _ work: @escaping @Sendable () async throws -> Result
    ) async throws -> Result {
        try await withThrowingTaskGroup(of: Result?.self) { group in
            group.addTask { try await work() }
            group.addTask {
                let scheduled = loop.scheduleTask(in: TimeAmount(timeout)) {}
                // A cancelled scheduled task fails its future, which ends the wait.
                try await withTaskCancellationHandler {
                    try await scheduled.futureResult.get()
                } onCancel: {
                    scheduled.cancel()
                }
                return nil
            }
            defer { group.cancelAll() }
            guard case .some(.some(let result)) = try await group.next() else { throw DeadlineExceeded() }
            return result
        }
    }
}

/// The loop shape on NIO: each request's deadline is an `NIOScheduledCallback` on the
/// connection's loop, NIO's allocation-free timer, armed and cancelled there.
struct NIOLoopDeadlines: LoopDeadlines {
    func make(on loop: any EventLoop, expire: @escaping @Sendable () -> Void) -> any LoopDeadline {
        Deadline(loop: loop, expiry: Expiry(expire: expire))
    }

    private struct Expiry: NIOScheduledCallbackHandler, Sendable {
        let expire: @Sendable () -> Void

        func handleScheduledCallback(eventLoop: some EventLoop) {
            self.expire()
        }
    }

    private final class Deadline: LoopDeadline {
        private let loop: any EventLoop
        private let expiry: Expiry
        private var scheduled: NIOScheduledCallback?

        init(loop: any EventLoop, expiry: Expiry) {
            self.loop = loop
            self.expiry = expiry
        }

        func arm(_ timeout: Duration) {
            // Throws only on a loop shutting down, which closes the connection anyway.
            self.scheduled = try? self.loop.scheduleCallback(in: TimeAmount(timeout), handler: self.expiry)
        }

        func disarm() {
            self.scheduled?.cancel()
            self.scheduled = nil
        }
    }
}
