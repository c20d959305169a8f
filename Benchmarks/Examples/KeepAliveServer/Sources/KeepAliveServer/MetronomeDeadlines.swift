import Metronome
import NIOCore

/// The Swift-concurrency shape on Metronome: the work runs in the request's own task, and
/// one engine timer (`withDeadline`) cancels that task at the deadline. No child task, no
/// second timer.
struct MetronomeTaskDeadline: TaskDeadline {
    let engine: TimerEngine

    func run<Result: Sendable>(
        within timeout: Duration, on loop: any EventLoop, _ work: @escaping @Sendable () async throws -> Result
    ) async throws -> Result {
        try await withDeadline(in: timeout, clock: EngineClock(backend: .engine(self.engine))) {
            do {
                return try await work()
            } catch is CancellationError where Task.isEngineDeadlineExpired {
                throw DeadlineExceeded()
            }
        }
    }
}

/// The task-group idiom on Metronome: the work races a child task sleeping on the engine's
/// clock; whichever ends first decides, and the other is cancelled.
struct MetronomeGroupDeadline: TaskDeadline {
    let clock: EngineClock

    func run<Result: Sendable>(
        within timeout: Duration, on loop: any EventLoop, _ work: @escaping @Sendable () async throws -> Result
    ) async throws -> Result {
        try await withThrowingTaskGroup(of: Result?.self) { group in
            group.addTask { try await work() }
            group.addTask {
                try await Task.sleep(for: timeout, clock: self.clock)
                return nil
            }
            defer { group.cancelAll() }
            guard case .some(.some(let result)) = try await group.next() else { throw DeadlineExceeded() }
            return result
        }
    }
}

/// The loop shape on Metronome: one `SafeDispatchTimer` per connection, its handler on the
/// connection's event loop (the loop's executor), scheduled and cancelled there around each
/// request.
struct MetronomeLoopDeadlines: LoopDeadlines {
    let engine: TimerEngine

    func make(on loop: any EventLoop, expire: @escaping @Sendable () -> Void) -> any LoopDeadline {
        Deadline(timer: SafeDispatchTimer(executor: loop.executor, backend: .engine(self.engine)), expire: expire)
    }

    private final class Deadline: LoopDeadline {
        private let timer: SafeDispatchTimer
        /// Made once, so that arming passes the same closure instead of allocating one.
        private let handler: @Sendable (Tick) -> Void

        init(timer: SafeDispatchTimer, expire: @escaping @Sendable () -> Void) {
            self.timer = timer
            self.handler = { _ in expire() }
        }

        func arm(_ timeout: Duration) {
            self.timer.schedule(after: timeout, handler: self.handler)
        }

        func disarm() {
            self.timer.cancel()
        }
    }
}
