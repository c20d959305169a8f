import NIOCore

/// The request took longer than its deadline.
struct DeadlineExceeded: Error {}

/// Runs `operation`, throwing ``DeadlineExceeded`` if `timeout` passes first: the task-group
/// idiom, racing the work against a sleep on `timers`. The one place that bounds a
/// request's work, so a library deadline can replace the idiom here alone.
func withRequestDeadline<Result: Sendable>(
    _ timeout: Duration,
    timers: any ServerTimers,
    on loop: any EventLoop,
    operation: @escaping @Sendable () async throws -> Result
) async throws -> Result {
    try await withThrowingTaskGroup(of: Result?.self) { group in
        group.addTask { try await operation() }
        group.addTask {
            try await timers.sleep(for: timeout, on: loop)
            return nil
        }
        // Whichever finishes first decides; the other is cancelled, which disarms the sleep.
        defer { group.cancelAll() }
        guard case .some(.some(let result)) = try await group.next() else { throw DeadlineExceeded() }
        return result
    }
}
