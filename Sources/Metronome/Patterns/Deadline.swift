import Glibc

/// Runs `operation` in the current task and cancels the task if it is still running
/// `timeout` from now.
///
/// The commonest timer in a server: "give this call 200 ms". No child task is made and no
/// second timer armed: the operation runs right here, and one one-shot timer on `engine`
/// cancels the current task from the engine's firing thread when the deadline passes, as a
/// cancellation from a parent would. The operation notices it the usual way (a throwing
/// `Task.sleep`, `Task.checkCancellation()`, a NIO or HTTP client that honours it) and
/// ends. The timer is disarmed as soon as the operation ends, whichever way.
///
/// ```swift
/// let user = try await withTimeout(.milliseconds(200)) {
///     try await database.user(id: id)
/// }
/// ```
///
/// How it ends:
/// - The operation returns: its result, even when the deadline passed meanwhile (the work
///   is done; throwing it away helps nobody).
/// - The operation throws after the deadline passed: ``TimeoutError``, in place of its own
///   error (most often the `CancellationError` the deadline caused).
/// - The operation throws before the deadline: its own error.
/// - A deadline already passed (a timeout of zero or less): ``TimeoutError`` at once, without
///   running the operation and without cancelling the task.
/// - An engine shut down before the call: ``TimerError/engineShutDown``, without running the
///   operation. An engine that shuts down while the operation runs can no longer keep the
///   deadline, so it cancels the task at once; an operation that then throws ends the call
///   with ``TimerError/engineShutDown``.
///
/// What a timeout leaves behind: **the calling task stays cancelled.** Swift has no way to
/// take a cancellation back, so after a timeout everything the task does next sees
/// `Task.isCancelled` (a later `Task.sleep` throws at once). Give each unit of work that
/// may time out a task of its own: a request handler's task, a child of a task group, or a
/// `Task {}` whose value you await. A timeout then ends that task's work, which is what a
/// deadline is for, and nothing else. A task already cancelled when the call starts runs
/// the operation all the same; the operation sees the cancellation as it would without a
/// deadline.
///
/// Deadlines nest: an inner deadline later than the outer one never fires first, and the
/// outer one's cancellation reaches the inner operation, whose error becomes the outer
/// call's ``TimeoutError``.
///
/// - Parameters:
///   - timeout: How long the operation may run, measured on `ContinuousClock`
///     (`CLOCK_BOOTTIME` on Linux), which counts time the machine spends suspended, as
///     `Task.sleep(for:)` does.
///   - leeway: How late the cancellation may come, so that deadlines can share the engine's
///     wake-ups; a negative leeway counts as none.
///   - engine: The engine whose firing thread cancels the task; the shared engine by default.
///   - isolation: The caller's actor, inherited: the operation runs where the caller does,
///     so neither it nor its result need be `Sendable`.
///   - operation: The work to bound.
/// - Returns: What `operation` returned.
/// - Throws: ``TimeoutError`` or ``TimerError`` as above, or the operation's own error.
public func withTimeout<Success>(
    _ timeout: Duration,
    leeway: Duration = .zero,
    engine: TimerEngine = .shared,
    isolation: isolated (any Actor)? = #isolation,
    operation: () async throws -> Success
) async throws -> Success {
    let deadline = TimerClock.boottime.now().nanoseconds.addingSaturating(timeout.saturatingNanoseconds)
    return try await withEngineDeadline(
        deadline, on: .boottime, leeway: leeway, engine: engine, isolation: isolation, operation: operation)
}

/// Runs `operation` in the current task and cancels the task if it is still running at
/// `deadline`.
///
/// ``withTimeout(_:leeway:engine:isolation:operation:)`` for a deadline carried from
/// elsewhere, such as a request's deadline that several calls share. `ContinuousClock` reads
/// `CLOCK_BOOTTIME` on Linux, the engine's ``TimerClock/boottime``, so the deadline is armed
/// on that clock as it is: it fires at the instant `ContinuousClock` names, never before,
/// suspended time included. Every other rule, and what a timeout leaves behind, is as
/// ``withTimeout(_:leeway:engine:isolation:operation:)`` says.
///
/// ```swift
/// let deadline = ContinuousClock.now + .seconds(2)
/// let profile = try await withDeadline(deadline) { try await profiles.load(id) }
/// let feed = try await withDeadline(deadline) { try await feeds.load(id) }
/// ```
///
/// - Parameters:
///   - deadline: When the task is cancelled if the operation still runs.
///   - leeway: How late the cancellation may come; a negative leeway counts as none.
///   - engine: The engine whose firing thread cancels the task.
///   - isolation: The caller's actor, inherited.
///   - operation: The work to bound.
/// - Returns: What `operation` returned.
/// - Throws: ``TimeoutError`` when the deadline passed and the operation then threw;
///   ``TimerError/engineShutDown`` for an engine shut down; the operation's own error.
public func withDeadline<Success>(
    _ deadline: ContinuousClock.Instant,
    leeway: Duration = .zero,
    engine: TimerEngine = .shared,
    isolation: isolated (any Actor)? = #isolation,
    operation: () async throws -> Success
) async throws -> Success {
    try await withDeadline(
        TimerInstant(deadline), leeway: leeway, engine: engine, isolation: isolation, operation: operation)
}

/// `withDeadline` for a deadline on `SuspendingClock`, which reads `CLOCK_MONOTONIC` on
/// Linux: it is armed on ``TimerClock/monotonic`` (the clock of `DispatchTime`) as it is.
public func withDeadline<Success>(
    _ deadline: SuspendingClock.Instant,
    leeway: Duration = .zero,
    engine: TimerEngine = .shared,
    isolation: isolated (any Actor)? = #isolation,
    operation: () async throws -> Success
) async throws -> Success {
    try await withDeadline(
        TimerInstant(deadline), leeway: leeway, engine: engine, isolation: isolation, operation: operation)
}

/// `withDeadline` for a deadline on one of the engine's clocks, armed on that clock (a
/// wall-clock deadline follows the wall clock's steps).
public func withDeadline<Success>(
    _ deadline: TimerInstant,
    leeway: Duration = .zero,
    engine: TimerEngine = .shared,
    isolation: isolated (any Actor)? = #isolation,
    operation: () async throws -> Success
) async throws -> Success {
    try await withEngineDeadline(
        deadline.nanoseconds, on: deadline.clock, leeway: leeway, engine: engine, isolation: isolation,
        operation: operation)
}

/// The public forms, once the deadline is nanoseconds on one of the engine's clocks.
func withEngineDeadline<Success>(
    _ deadline: Int64,
    on clock: TimerClock,
    leeway: Duration,
    engine: TimerEngine,
    isolation: isolated (any Actor)?,
    operation: () async throws -> Success
) async throws -> Success {
    guard !engine.hasStopped else { throw TimerError(code: ESHUTDOWN, operation: "mtr_engine_stop") }
    guard deadline > clock.now().nanoseconds else { throw TimeoutError() }
    // An async function always runs in a task.
    let watch = withUnsafeCurrentTask { DeadlineWatch(task: $0!) }
    let core = TimerCore.make(delivery: nil, firing: engine, clock: clock)
    defer { core.ownerGone() }
    let window = min(max(leeway.saturatingNanoseconds, 0), Int64.max - deadline)
    let schedule = TimerSchedule(deadlineNanoseconds: deadline, leewayNanoseconds: window)!
    // The handler alone holds the release: when the engine lets go of the handler without
    // running it, the engine has stopped (or refused the arming, which throws here).
    _ = try core.schedule(schedule) { [release = DeadlineRelease(watch)] _ in release.watch.deadlinePassed() }
    guard watch.armed() else { throw TimerError(code: ESHUTDOWN, operation: "mtr_engine_stop") }

    let outcome: Result<Success, any Error>
    do {
        outcome = .success(try await operation())
    } catch {
        outcome = .failure(error)
    }
    let ending = watch.end()
    switch outcome {
    case .success(let value):
        return value
    case .failure(let error):
        if ending == .timedOut || deadline <= clock.now().nanoseconds { throw TimeoutError() }
        if ending == .engineStopped { throw TimerError(code: ESHUTDOWN, operation: "mtr_engine_stop") }
        throw error
    }
}
