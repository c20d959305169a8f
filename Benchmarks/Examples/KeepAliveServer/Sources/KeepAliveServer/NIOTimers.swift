import NIOConcurrencyHelpers
import NIOCore

/// The server's timers the way NIO builds them: `IdleStateHandler` per connection and
/// `scheduleRepeatedTask` for the flush. The request deadlines of the NIO builds are
/// ``NIOTaskDeadline`` and its kin.
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
