/// What ``withTimeout(_:leeway:engine:isolation:operation:)`` threw when its deadline passed
/// and the operation then threw, in place of the operation's own error.
///
/// Deprecated with `withTimeout`, and to be removed before 1.0: the standard's
/// `withDeadline` (SE-0526), which this module's `withDeadline` follows, throws the body's
/// own error, typed, and leaves a wrapper out by design.
@available(*, deprecated, message: "withDeadline throws the body's own error; read Task.isEngineDeadlineExpired")
public struct TimeoutError: Error, Hashable, Sendable, CustomStringConvertible {
    /// Creates the error.
    public init() {}

    /// Says what happened, for logs.
    public var description: String {
        "the deadline passed before the operation finished"
    }
}

/// Runs `operation` with a deadline `timeout` from now, as before `withDeadline` took the
/// standard's shape: throws ``TimeoutError`` in place of the operation's error when the
/// deadline passed, and ``TimerError/engineShutDown`` for a stopped engine.
///
/// Deprecated, and to be removed before 1.0: call `withDeadline(in:tolerance:body:)`, which
/// throws the body's own error (a `CancellationError` after the deadline), and an
/// ``EngineClock`` for an engine of your own.
///
/// - Parameters:
///   - timeout: How long the operation may run, on `ContinuousClock`.
///   - leeway: How late the cancellation may come.
///   - engine: The engine whose firing thread cancels the task.
///   - isolation: The caller's actor, inherited.
///   - operation: The work to bound.
/// - Returns: What `operation` returned.
/// - Throws: ``TimeoutError``, ``TimerError``, or the operation's own error.
@available(*, deprecated, message: "Use withDeadline(in:tolerance:body:), which throws the body's own error")
public func withTimeout<Success>(
    _ timeout: Duration,
    leeway: Duration = .zero,
    engine: TimerEngine = .shared,
    isolation: isolated (any Actor)? = #isolation,
    operation: () async throws -> Success
) async throws -> Success {
    let clock = EngineClock(backend: .engine(engine), clock: .boottime)
    let expiration = clock.now + timeout
    do {
        return try await withDeadline(expiration, tolerance: leeway, clock: clock) { try await operation() }
    } catch {
        if engine.hasStopped { throw TimerError.engineShutDown }
        if clock.now >= expiration { throw TimeoutError() }
        throw error
    }
}
