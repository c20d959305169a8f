/// Runs `body` in the current task and cancels the task if `body` is still running at
/// `expiration`: Swift's `withDeadline` (SE-0526), timed by Metronome's engine.
///
/// The commonest timer in a server: "this request has until 14:03:07.250". No child task
/// is made: the body runs right here, and one one-shot timer on the shared engine cancels
/// the current task from the engine's firing thread when the deadline passes, as a
/// cancellation from a parent would. The body notices it the usual way (a throwing
/// `Task.sleep`, `Task.checkCancellation()`, a NIO or HTTP client that honours it) and
/// ends. The timer is disarmed as soon as the body ends, whichever way, and with a
/// `tolerance` it shares the engine's wake-ups with the deadlines around it.
///
/// ```swift
/// let deadline = ContinuousClock.now + .seconds(2)
/// let profile = try await withDeadline(deadline) { try await profiles.load(id) }
/// let feed = try await withDeadline(deadline) { try await feeds.load(id) }
/// ```
///
/// The call returns or throws what `body` does, and nothing else, as the standard's
/// function does:
/// - A result is kept even when the deadline passed meanwhile (the work is done).
/// - An error is the body's own: after the deadline, most often the `CancellationError`
///   that the deadline's cancellation caused. Inside the body,
///   `Task.isEngineDeadlineExpired` tells that cancellation from another.
/// - The call waits for the body: a body that ignores cancellation runs past the deadline.
/// - A deadline already passed cancels the task before the body starts, so the body runs
///   cancelled. So does an engine that was shut down (only an engine of your own, through
///   ``EngineClock``, can be): a deadline that cannot be timed never lets work run unbounded.
///
/// What a deadline leaves behind: **the calling task stays cancelled.** Swift has no way to
/// take a cancellation back, so after a deadline passed everything the task does next sees
/// `Task.isCancelled`. Give each unit of work that may overrun its own task: a request
/// handler's task, a child of a task group, or a `Task {}` whose value you await. A task
/// already cancelled when the call starts runs the body all the same.
///
/// Deadlines nest: the earliest one in force is the one that cancels, and callees read it
/// with `Task.activeEngineDeadline(for:)`.
///
/// ## Beside the standard's `withDeadline`
///
/// This is the standard's shape: the same labels, defaults and error rule, so code moves
/// to the standard's function by deleting `import Metronome`. While both are visible, every
/// unqualified call resolves to this module's (checked by `scripts/check-snippets.sh`
/// against a stand-in with the proposal's signatures); `_Concurrency.withDeadline(...)`
/// names the standard's, and `Metronome.withDeadline(...)` this one.
///
/// - Parameters:
///   - expiration: When the task is cancelled if the body still runs. `ContinuousClock`
///     reads `CLOCK_BOOTTIME` on Linux, the engine's ``TimerClock/boottime``, so the
///     deadline is armed on that clock as it is: never before the instant it names,
///     suspended time included. The engine counts whole nanoseconds: an instant between
///     two is armed, and read back by `Task.activeEngineDeadline(for:)`, at the later one.
///   - tolerance: How late the cancellation may come, so that deadlines share the engine's
///     wake-ups; `nil` (or a negative duration) means none.
///   - clock: The clock of `expiration`.
///   - body: The work to bound. It runs on the caller's actor, so neither it nor its result
///     need be `Sendable`.
/// - Returns: What `body` returned.
/// - Throws: What `body` threw.
nonisolated(nonsending) public func withDeadline<Return: ~Copyable, Failure: Error>(
    _ expiration: ContinuousClock.Instant,
    tolerance: Duration? = nil,
    clock: ContinuousClock = ContinuousClock(),
    body: nonisolated(nonsending) () async throws(Failure) -> Return
) async throws(Failure) -> Return {
    try await withEngineDeadline(
        TimerInstant(roundingUp: expiration), tolerance: tolerance, firing: nil, body: body)
}

/// `withDeadline` for a deadline on `SuspendingClock`, which reads `CLOCK_MONOTONIC` on
/// Linux: armed on ``TimerClock/monotonic`` (the clock of `DispatchTime`) as it is. Every
/// rule is as ``withDeadline(_:tolerance:clock:body:)-(ContinuousClock.Instant,_,_,_)`` says.
nonisolated(nonsending) public func withDeadline<Return: ~Copyable, Failure: Error>(
    _ expiration: SuspendingClock.Instant,
    tolerance: Duration? = nil,
    clock: SuspendingClock,
    body: nonisolated(nonsending) () async throws(Failure) -> Return
) async throws(Failure) -> Return {
    try await withEngineDeadline(
        TimerInstant(roundingUp: expiration), tolerance: tolerance, firing: nil, body: body)
}

/// `withDeadline` on an ``EngineClock``: timed by the clock's backend (an engine of your
/// own, or a `ManualTimeline` in tests, where the deadline passes in virtual time), and
/// armed on the clock of `expiration` (a wall-clock deadline follows the wall clock's
/// steps). Every rule is as the `ContinuousClock` form says.
///
/// ```swift
/// let clock = EngineClock(backend: .engine(engine))
/// let rows = try await withDeadline(clock.now + .milliseconds(200), clock: clock) {
///     try await database.query(sql)
/// }
/// ```
nonisolated(nonsending) public func withDeadline<Return: ~Copyable, Failure: Error>(
    _ expiration: TimerInstant,
    tolerance: Duration? = nil,
    clock: EngineClock,
    body: nonisolated(nonsending) () async throws(Failure) -> Return
) async throws(Failure) -> Return {
    try await withEngineDeadline(expiration, tolerance: tolerance, firing: clock.backend.firing, body: body)
}

/// Runs `body` in the current task and cancels the task if `body` is still running
/// `timeout` from now, measured on `ContinuousClock`: the standard's shorthand.
///
/// ```swift
/// let user = try await withDeadline(in: .milliseconds(200)) {
///     try await database.user(id: id)
/// }
/// ```
///
/// Every rule is as ``withDeadline(_:tolerance:clock:body:)-(ContinuousClock.Instant,_,_,_)``
/// says.
///
/// - Parameters:
///   - timeout: How long the body may run.
///   - body: The work to bound.
/// - Returns: What `body` returned.
/// - Throws: What `body` threw.
nonisolated(nonsending) public func withDeadline<Return: ~Copyable, Failure: Error>(
    in timeout: Duration,
    body: nonisolated(nonsending) () async throws(Failure) -> Return
) async throws(Failure) -> Return {
    // Two forms where the standard has one with `tolerance: Duration? = nil`: a call that
    // leaves out the tolerance, or gives one, then matches this module's more closely than
    // the standard's, so that it never becomes ambiguous when the toolchain ships it.
    try await withEngineDeadline(in: timeout, on: .boottime, tolerance: nil, firing: nil, body: body)
}

/// ``withDeadline(in:body:)`` with a tolerance: how late the cancellation may come, so that
/// deadlines share the engine's wake-ups.
nonisolated(nonsending) public func withDeadline<Return: ~Copyable, Failure: Error>(
    in timeout: Duration,
    tolerance: Duration,
    body: nonisolated(nonsending) () async throws(Failure) -> Return
) async throws(Failure) -> Return {
    try await withEngineDeadline(in: timeout, on: .boottime, tolerance: tolerance, firing: nil, body: body)
}

/// ``withDeadline(in:body:)`` measured on `clock`.
nonisolated(nonsending) public func withDeadline<Return: ~Copyable, Failure: Error>(
    in timeout: Duration,
    tolerance: Duration? = nil,
    clock: ContinuousClock,
    body: nonisolated(nonsending) () async throws(Failure) -> Return
) async throws(Failure) -> Return {
    try await withEngineDeadline(in: timeout, on: .boottime, tolerance: tolerance, firing: nil, body: body)
}

/// ``withDeadline(in:body:)`` measured on `clock`.
nonisolated(nonsending) public func withDeadline<Return: ~Copyable, Failure: Error>(
    in timeout: Duration,
    tolerance: Duration? = nil,
    clock: SuspendingClock,
    body: nonisolated(nonsending) () async throws(Failure) -> Return
) async throws(Failure) -> Return {
    try await withEngineDeadline(in: timeout, on: .monotonic, tolerance: tolerance, firing: nil, body: body)
}

/// ``withDeadline(in:body:)`` measured and timed by `clock`.
nonisolated(nonsending) public func withDeadline<Return: ~Copyable, Failure: Error>(
    in timeout: Duration,
    tolerance: Duration? = nil,
    clock: EngineClock,
    body: nonisolated(nonsending) () async throws(Failure) -> Return
) async throws(Failure) -> Return {
    try await withEngineDeadline(clock.now + timeout, tolerance: tolerance, firing: clock.backend.firing, body: body)
}

/// The `in:` forms on `ContinuousClock` and `SuspendingClock`, which read `clock`: the
/// deadline is `timeout` from one reading, rounded up to a whole nanosecond.
@inline(__always)
func withEngineDeadline<Return: ~Copyable, Failure: Error>(
    in timeout: Duration,
    on clock: TimerClock,
    tolerance: Duration?,
    firing: (any TimerFiring)?,
    isolation: isolated (any Actor)? = #isolation,
    body: nonisolated(nonsending) () async throws(Failure) -> Return
) async throws(Failure) -> Return {
    let now = clock.nanosecondsNow
    let expiration = TimerInstant(
        nanoseconds: now.addingSaturating(TimerInstant.nanosecondsRoundedUp(timeout)), clock: clock)
    return try await withEngineDeadline(
        expiration, now: now, tolerance: tolerance, firing: firing, isolation: isolation, body: body)
}

/// Every public form, once the deadline is an instant on one of the engine's clocks, timed
/// by `firing`, or by the shared engine for `nil`. Only the binding and the body are
/// generic here: the rest (``DeadlineScope``) is compiled once, not run through the
/// witnesses of the body's types.
///
/// The caller's isolation is a parameter rather than `nonisolated(nonsending)`, so that
/// the closure given to the task-local's `withValue`, which captures it, runs there too:
/// a closure of its own would run on the global executor, a hop there and back per call.
@inline(__always)
func withEngineDeadline<Return: ~Copyable, Failure: Error>(
    _ expiration: TimerInstant,
    now: Int64? = nil,
    tolerance: Duration?,
    firing: (any TimerFiring)?,
    isolation: isolated (any Actor)? = #isolation,
    body: nonisolated(nonsending) () async throws(Failure) -> Return
) async throws(Failure) -> Return {
    // The scope holds the watch's only reference of its own, so that its end finds the
    // watch unshared and keeps it for the thread's next deadline: no copy of it here.
    var scope = DeadlineScope(expiration, now: now, tolerance: tolerance, firing: firing)
    defer { scope.end() }
    var result: Return? = nil
    do {
        try await DeadlineWatch.$innermost.withValue(scope.watch) {
            scope.watch.recordBinding()
            _ = isolation
            result = try await body()
        }
    } catch {
        // `withValue` rethrows untyped; only `body` throws in it.
        throw error as! Failure
    }
    return result.take()!
}

extension TimerInstant {
    /// `instant` on the engine's boottime clock, a fraction of a nanosecond rounded up to
    /// the next one: a deadline is never armed, nor read back, before the instant it names.
    init(roundingUp instant: ContinuousClock.Instant) {
        self.init(
            nanoseconds: Self.nanosecondsRoundedUp(ContinuousClock().systemEpoch.duration(to: instant)),
            clock: .boottime)
    }

    /// `instant` on the engine's monotonic clock, rounded up as above.
    init(roundingUp instant: SuspendingClock.Instant) {
        self.init(
            nanoseconds: Self.nanosecondsRoundedUp(SuspendingClock().systemEpoch.duration(to: instant)),
            clock: .monotonic)
    }

    /// `duration` in nanoseconds, rounded toward the future and clamped to `Int64`.
    static func nanosecondsRoundedUp(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        // `components` truncates toward zero, so a negative duration's fraction is negative.
        let fraction =
            attoseconds > 0
            ? (attoseconds + attosecondsPerNanosecond - 1) / attosecondsPerNanosecond
            : attoseconds / attosecondsPerNanosecond
        let (whole, overflow) = seconds.multipliedReportingOverflow(by: nanosecondsPerSecond)
        if overflow { return seconds > 0 ? .max : .min }
        return whole.addingSaturating(fraction)
    }
}
