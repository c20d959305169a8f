import NIOCore

/// A request's work took longer than its deadline: the server answers 503.
struct DeadlineExceeded: Error {}

/// How a request's work is kept to its deadline: in the request's task, or on the
/// connection's event loop.
enum RequestDeadline: Sendable {
    case task(any TaskDeadline)
    case loop(any LoopDeadlines)
}

/// A deadline for work that runs in a task.
protocol TaskDeadline: Sendable {
    /// Runs `work`, throwing ``DeadlineExceeded`` if `timeout` passes first and the work
    /// then throws.
    func run<Result: Sendable>(
        within timeout: Duration, on loop: any EventLoop, _ work: @escaping @Sendable () async throws -> Result
    ) async throws -> Result
}

/// Makes each connection's deadline for work that runs on its event loop.
protocol LoopDeadlines: Sendable {
    /// A deadline used on `loop` only, which calls `expire` there when it passes while armed.
    func make(on loop: any EventLoop, expire: @escaping @Sendable () -> Void) -> any LoopDeadline
}

/// One connection's deadline, armed and disarmed on its event loop around each request.
protocol LoopDeadline: AnyObject {
    func arm(_ timeout: Duration)
    func disarm()
}

/// The floor: the work runs as it would under a deadline, with no timer.
struct NoDeadline: TaskDeadline, LoopDeadlines {
    func run<Result: Sendable>(
        within timeout: Duration, on loop: any EventLoop, _ work: @escaping @Sendable () async throws -> Result
    ) async throws -> Result {
        try await work()
    }

    func make(on loop: any EventLoop, expire: @escaping @Sendable () -> Void) -> any LoopDeadline {
        Unarmed()
    }

    private final class Unarmed: LoopDeadline {
        func arm(_ timeout: Duration) {}
        func disarm() {}
    }
}
