import Glibc

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
        TimerInstant(roundingUp: expiration), tolerance: tolerance, backend: nil, body: body)
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
        TimerInstant(roundingUp: expiration), tolerance: tolerance, backend: nil, body: body)
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
    try await withEngineDeadline(expiration, tolerance: tolerance, backend: clock.backend, body: body)
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
    try await withEngineDeadline(in: timeout, on: .boottime, tolerance: nil, backend: nil, body: body)
}

/// ``withDeadline(in:body:)`` with a tolerance: how late the cancellation may come, so that
/// deadlines share the engine's wake-ups.
nonisolated(nonsending) public func withDeadline<Return: ~Copyable, Failure: Error>(
    in timeout: Duration,
    tolerance: Duration,
    body: nonisolated(nonsending) () async throws(Failure) -> Return
) async throws(Failure) -> Return {
    try await withEngineDeadline(in: timeout, on: .boottime, tolerance: tolerance, backend: nil, body: body)
}

/// ``withDeadline(in:body:)`` measured on `clock`.
nonisolated(nonsending) public func withDeadline<Return: ~Copyable, Failure: Error>(
    in timeout: Duration,
    tolerance: Duration? = nil,
    clock: ContinuousClock,
    body: nonisolated(nonsending) () async throws(Failure) -> Return
) async throws(Failure) -> Return {
    try await withEngineDeadline(in: timeout, on: .boottime, tolerance: tolerance, backend: nil, body: body)
}

/// ``withDeadline(in:body:)`` measured on `clock`.
nonisolated(nonsending) public func withDeadline<Return: ~Copyable, Failure: Error>(
    in timeout: Duration,
    tolerance: Duration? = nil,
    clock: SuspendingClock,
    body: nonisolated(nonsending) () async throws(Failure) -> Return
) async throws(Failure) -> Return {
    try await withEngineDeadline(in: timeout, on: .monotonic, tolerance: tolerance, backend: nil, body: body)
}

/// ``withDeadline(in:body:)`` measured and timed by `clock`.
nonisolated(nonsending) public func withDeadline<Return: ~Copyable, Failure: Error>(
    in timeout: Duration,
    tolerance: Duration? = nil,
    clock: EngineClock,
    body: nonisolated(nonsending) () async throws(Failure) -> Return
) async throws(Failure) -> Return {
    try await withEngineDeadline(clock.now + timeout, tolerance: tolerance, backend: clock.backend, body: body)
}

/// The `in:` forms on `ContinuousClock` and `SuspendingClock`, which read `clock`: the
/// deadline is `timeout` from one reading, rounded up to a whole nanosecond.
@inline(__always)
func withEngineDeadline<Return: ~Copyable, Failure: Error>(
    in timeout: Duration,
    on clock: TimerClock,
    tolerance: Duration?,
    backend: SafeDispatchTimer.Backend?,
    isolation: isolated (any Actor)? = #isolation,
    body: nonisolated(nonsending) () async throws(Failure) -> Return
) async throws(Failure) -> Return {
    let now = clock.nanosecondsNow
    let expiration = TimerInstant(
        nanoseconds: now.addingSaturating(TimerInstant.nanosecondsRoundedUp(timeout)), clock: clock)
    return try await withEngineDeadline(
        expiration, now: now, tolerance: tolerance, backend: backend, isolation: isolation, body: body)
}

/// Every public form, once the deadline is an instant on one of the engine's clocks, timed
/// by `backend`, or by the shared engine for `nil` (which is then not even looked up when
/// the thread has an idle timer of it).
///
/// The caller's isolation is a parameter rather than `nonisolated(nonsending)`, so that
/// the closure given to the task-local's `withValue`, which captures it, runs there too:
/// a closure of its own would run on the global executor, a hop there and back per call.
@inline(__always)
func withEngineDeadline<Return: ~Copyable, Failure: Error>(
    _ expiration: TimerInstant,
    now: Int64? = nil,
    tolerance: Duration?,
    backend: SafeDispatchTimer.Backend?,
    isolation: isolated (any Actor)? = #isolation,
    body: nonisolated(nonsending) () async throws(Failure) -> Return
) async throws(Failure) -> Return {
    // An async function always runs in a task.
    var watch = withUnsafeCurrentTask { task in
        IdleDeadlineTimers.watch(task: task!, deadline: expiration, outer: DeadlineWatch.inForce)
    }
    defer { IdleDeadlineTimers.giveBack(&watch) }
    let timer = backend.map { DeadlineTimer($0, clock: expiration.clock) } ?? DeadlineTimer(sharedOn: expiration.clock)
    defer { timer.end() }
    let deadline = expiration.nanoseconds
    if deadline <= now ?? timer.core.now() {
        watch.cancelAtOnce(passed: true)
    } else {
        let window = min(max(tolerance?.saturatingNanoseconds ?? 0, 0), Int64.max - deadline)
        let schedule = TimerSchedule(deadlineNanoseconds: deadline, leewayNanoseconds: window)!
        if !timer.arm(schedule, for: watch) { watch.cancelAtOnce(passed: false) }
    }
    defer { watch.end() }
    var result: Return? = nil
    do {
        try await DeadlineWatch.$innermost.withValue(watch) {
            watch.recordBinding()
            _ = isolation
            result = try await body()
        }
    } catch {
        // `withValue` rethrows untyped; only `body` throws in it.
        throw error as! Failure
    }
    return result.take()!
}

/// A deadline's timer. On the shared engine it is one of the current thread's idle ones,
/// armed anew (a move of its C timer) and disarmed when the call ends, so that a call makes
/// no timer: the shared engine is never stopped, so its timers outlive any call. On another
/// backend, which may stop, a timer of the call's own tells the deadline when the engine
/// lets go of it unfired.
struct DeadlineTimer {
    let core: TimerCore
    /// Whether the timer is one of the shared engine's idle ones.
    private let isShared: Bool

    /// A timer of the shared engine.
    init(sharedOn clock: TimerClock) {
        self.core = IdleDeadlineTimers.take(on: clock)
        self.isShared = true
    }

    init(_ backend: SafeDispatchTimer.Backend, clock: TimerClock) {
        if case .engine(let engine) = backend, engine.isShared {
            self.core = IdleDeadlineTimers.take(on: clock)
            self.isShared = true
        } else {
            self.core = TimerCore.make(delivery: nil, firing: backend.firing, clock: clock)
            self.isShared = false
        }
    }

    /// Arms `schedule` to end `watch`'s deadline: `false` when the engine refused it or
    /// stopped meanwhile, and the deadline can no longer be timed.
    func arm(_ schedule: TimerSchedule, for watch: DeadlineWatch) -> Bool {
        let scheduled: Bool?
        if self.isShared {
            // The handler holds only the watch, the one allocation of a call.
            scheduled = try? self.core.schedule(schedule) { [watch] _ in watch.deadlinePassed() }
        } else {
            // The handler alone holds the release: when the engine lets go of the handler
            // without running it, the engine has stopped (or refused the arming).
            scheduled = try? self.core.schedule(schedule) { [release = DeadlineRelease(watch)] _ in
                release.watch.deadlinePassed()
            }
        }
        return scheduled == true && watch.armed()
    }

    /// Disarms the timer for good: back to the thread's idle ones, or retired.
    func end() {
        if self.isShared { IdleDeadlineTimers.giveBack(self.core) } else { self.core.ownerGone() }
    }
}

/// The shared engine's deadline timers that no call is using, a few per thread: a call
/// takes one on the thread it starts on and gives it back on the one it ends on, with no
/// lock, so threads share nothing but the engine.
enum IdleDeadlineTimers {
    /// As many as deadlines nested at once on a thread, in the common case; a deeper nest
    /// retires the timers it made.
    private static let perThread = 4

    private final class Idle {
        // Reached only from the thread that owns it.
        @exclusivity(unchecked) var timers: [TimerCore] = []
        @exclusivity(unchecked) var watches: [DeadlineWatch] = []
        /// The process's fork count when `timers` were made: in a forked child they are
        /// timers of the parent's shared engine, which is dead there.
        @exclusivity(unchecked) var fork = ForkGeneration.current
    }

    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key) { stored in
            // The thread ends, and its idle timers with it.
            guard let stored else { return }
            let idle = Unmanaged<Idle>.fromOpaque(stored).takeRetainedValue()
            guard idle.fork == ForkGeneration.current else { return }
            for timer in idle.timers { timer.ownerGone() }
        }
        return key
    }()

    private static var idle: Idle {
        if let stored = pthread_getspecific(self.key) {
            return Unmanaged<Idle>.fromOpaque(stored).takeUnretainedValue()
        }
        let idle = Idle()
        idle.timers.reserveCapacity(self.perThread)
        idle.watches.reserveCapacity(self.perThread)
        pthread_setspecific(self.key, Unmanaged.passRetained(idle).toOpaque())
        return idle
    }

    /// An idle timer of the shared engine on `clock`, or a new one.
    static func take(on clock: TimerClock) -> TimerCore {
        let idle = self.idle
        let fork = ForkGeneration.current
        if idle.fork != fork {
            // Left alone: the parent's engine, not this process's, holds them.
            idle.timers.removeAll(keepingCapacity: true)
            idle.fork = fork
        }
        if let index = idle.timers.lastIndex(where: { $0.clock == clock }) { return idle.timers.remove(at: index) }
        return TimerCore.make(delivery: nil, firing: TimerEngine.shared, clock: clock)
    }

    /// A watch for a new deadline: one the thread keeps, or a new one.
    static func watch(task: UnsafeCurrentTask, deadline: TimerInstant, outer: DeadlineWatch?) -> DeadlineWatch {
        guard let watch = self.idle.watches.popLast() else {
            return DeadlineWatch(task: task, deadline: deadline, outer: outer)
        }
        watch.reuse(task: task, deadline: deadline, outer: outer)
        return watch
    }

    /// Keeps `watch`, whose scope has ended, for the next call on this thread, unless
    /// anything else still holds it: an unstructured task that copied the binding, or a
    /// handler still running on the firing thread. Kept only then, no reader can ever see it
    /// change.
    static func giveBack(_ watch: inout DeadlineWatch) {
        watch.release()
        let idle = self.idle
        guard idle.watches.count < self.perThread, isKnownUniquelyReferenced(&watch) else { return }
        idle.watches.append(watch)
    }

    /// Disarms `timer` and keeps it for the next call on this thread.
    static func giveBack(_ timer: TimerCore) {
        _ = timer.cancel()
        let idle = self.idle
        guard idle.timers.count < self.perThread, idle.fork == ForkGeneration.current else { return timer.ownerGone() }
        idle.timers.append(timer)
    }
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
