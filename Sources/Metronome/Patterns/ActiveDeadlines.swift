/// The deadlines of Metronome's `withDeadline` that the current task runs under, for the
/// callees inside them: an HTTP or database client that passes the deadline on, or maps a
/// `CancellationError` to a timeout of its own.
///
/// These mirror the standard's `Task.hasActiveDeadline` and `Task.activeDeadline(for:)`
/// (SE-0526) under names of their own, so that neither shadows the other when a toolchain
/// ships them; they see only deadlines set by this module's `withDeadline`.
///
/// A task sees only the deadlines that can cancel it: those set in the task itself, and, in
/// a child task (`async let`, a task group's), those of its parent, whose cancellation
/// reaches it. An unstructured `Task {}` made inside a deadline's body inherits its
/// task-local values, but the deadline never cancels it, so it sees none of them; neither
/// does a `Task.detached`.
///
/// ```swift
/// func query(_ sql: String) async throws(QueryError) -> Rows {
///     do {
///         return try await connection.run(sql, timeout: Task.activeEngineDeadline(for: ContinuousClock()))
///     } catch is CancellationError where Task.isEngineDeadlineExpired {
///         throw .timedOut
///     }
/// }
/// ```
extension Task where Success == Never, Failure == Never {
    /// Whether the current task runs inside a `withDeadline` of this module that can
    /// cancel it.
    public static var hasActiveEngineDeadline: Bool {
        DeadlineWatch.inForce != nil
    }

    /// The earliest deadline in force in the current task on `ContinuousClock` (the
    /// engine's ``TimerClock/boottime``), or `nil` when none is.
    ///
    /// Nested deadlines on other clocks are left out: instants of different clocks do not
    /// compare. Ask for each clock the caller can use.
    ///
    /// - Parameter clock: The clock to read the deadline on.
    /// - Returns: The earliest deadline on that clock.
    public static func activeEngineDeadline(for clock: ContinuousClock) -> ContinuousClock.Instant? {
        earliestDeadline(on: .boottime).map { clock.systemEpoch.advanced(by: .nanoseconds($0)) }
    }

    /// The earliest deadline in force in the current task on `SuspendingClock` (the
    /// engine's ``TimerClock/monotonic``), or `nil` when none is.
    ///
    /// - Parameter clock: The clock to read the deadline on.
    /// - Returns: The earliest deadline on that clock.
    public static func activeEngineDeadline(for clock: SuspendingClock) -> SuspendingClock.Instant? {
        earliestDeadline(on: .monotonic).map { clock.systemEpoch.advanced(by: .nanoseconds($0)) }
    }

    /// The earliest deadline in force in the current task on the ``TimerClock`` of
    /// `clock`, whichever form set it, or `nil` when none is.
    ///
    /// - Parameter clock: The clock to read the deadline on.
    /// - Returns: The earliest deadline on that clock.
    public static func activeEngineDeadline(for clock: EngineClock) -> TimerInstant? {
        earliestDeadline(on: clock.clock).map { TimerInstant(nanoseconds: $0, clock: clock.clock) }
    }

    /// Whether a deadline in force in the current task has cancelled it: it passed, or its
    /// engine was shut down and could no longer time it.
    ///
    /// What the standard tells by `CancellationError`'s reason (`.deadlineExpired`) where
    /// the toolchain has one. The thrown type stays the body's own; read this inside the
    /// deadline's body, where the cancellation is caught.
    public static var isEngineDeadlineExpired: Bool {
        var watch = DeadlineWatch.inForce
        while let current = watch {
            if current.hasCancelled { return true }
            watch = current.outer
        }
        return false
    }

    private static func earliestDeadline(on clock: TimerClock) -> Int64? {
        var earliest: Int64?
        var watch = DeadlineWatch.inForce
        while let current = watch {
            if current.deadline.clock == clock { earliest = min(earliest ?? .max, current.deadline.nanoseconds) }
            watch = current.outer
        }
        return earliest
    }
}
