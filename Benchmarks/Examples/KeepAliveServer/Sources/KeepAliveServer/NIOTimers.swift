import NIOConcurrencyHelpers
import NIOCore

/// The server's timers the way NIO builds them: `IdleStateHandler` per connection, request
/// deadlines on `EventLoop.scheduleTask`, and `scheduleRepeatedTask` for the flush.
final class NIOTimers: ServerTimers {
    private let idleTimeout: TimeAmount
    private let counters: ServerCounters
    private let flushLoop: any EventLoop
    private let flushTask = NIOLockedValueBox<RepeatedTask?>(nil)

    init(idleTimeout: Duration, counters: ServerCounters, flushLoop: any EventLoop) {
        self.idleTimeout = TimeAmount(idleTimeout)
        self.counters = counters
        self.flushLoop = flushLoop
    }

    func addIdleTimeout(to channel: any Channel) throws {
        try channel.pipeline.syncOperations.addHandlers(
            IdleStateHandler(readTimeout: self.idleTimeout),
            IdleEventCloser(counters: self.counters)
        )
    }

    /// The task-group idiom: the work races a scheduled task on the request's loop;
    /// whichever finishes first decides, and the other is cancelled.
    func withDeadline<Result: Sendable>(
        _ timeout: Duration, on loop: any EventLoop, _ work: @escaping @Sendable () async throws -> Result
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

    func startFlushing(every interval: Duration, _ flush: @escaping @Sendable () -> Void) {
        let period = TimeAmount(interval)
        let task = self.flushLoop.scheduleRepeatedTask(initialDelay: period, delay: period) { _ in flush() }
        self.flushTask.withLockedValue { $0 = task }
    }

    func stop() async -> KeyValuePairs<String, String> {
        if let task = self.flushTask.withLockedValue({ $0 }) {
            let stopped = self.flushLoop.makePromise(of: Void.self)
            task.cancel(promise: stopped)
            try? await stopped.futureResult.get()
        }
        return ["timers": "\"nio\""]
    }
}
