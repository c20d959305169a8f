/// The `Duration` family: delays, periods and leeways as `Duration`, deadlines as
/// ``TimerInstant``s on the timer's own clock.
///
/// Every form follows the rules that every type of the library follows (see
/// <doc:ChoosingAnAPI>): a delay or deadline that has passed fires at once, a negative
/// leeway is none, a span past `Int64` nanoseconds (about 292 years) saturates, a leeway
/// longer than the period is cut to it, and a period that is not positive is refused, as is
/// a deadline on another clock. The `schedule` forms answer `false` for every refusal, as
/// the `DispatchSourceTimer`-shaped forms do; the `start` forms throw why, and keep `false`
/// for a timer not in a state to be scheduled (running or suspended).
extension SafeDispatchTimer {
    /// Fires `handler` after `delay` and then every `period`, each firing allowed to be up
    /// to `leeway` late so that wake-ups can be shared.
    ///
    /// The first deadline is `delay` from now on the timer's own clock (as its backend reads
    /// it, so virtual time works the same way), and later ones are `first + k · period`.
    ///
    /// ```swift
    /// timer.schedule(after: .seconds(1), every: .milliseconds(100), leeway: .milliseconds(5)) { tick in
    ///     refresh(missed: tick.missed)
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - delay: How long from now the first firing is; zero or negative fires at once.
    ///   - period: The distance between firings, or `nil` for a one-shot.
    ///   - leeway: How late each firing may be.
    ///   - missedTicks: What a repeating timer does after a late tick: by default one tick
    ///     for the latest deadline, counting the others in ``Tick/missed``.
    ///   - handler: Runs once per firing with what the firing stands for.
    /// - Returns: `false`, doing nothing, unless the timer is idle or cancelled, or when
    ///   ``start(after:every:leeway:missedTicks:handler:)-(_,_,_,_,(Tick)->Void)`` would throw.
    @discardableResult
    public func schedule(
        after delay: Duration,
        every period: Duration? = nil,
        leeway: Duration = .zero,
        missedTicks: MissedTickPolicy = .skip,
        handler: @escaping @Sendable (Tick) -> Void
    ) -> Bool {
        guard
            let schedule = try? self.core.schedule(
                after: delay, every: period, leeway: leeway, missedTicks: missedTicks)
        else { return false }
        return self.arm(schedule, handler: handler)
    }

    /// ``schedule(after:every:leeway:missedTicks:handler:)-(_,_,_,_,(Tick)->Void)`` with a handler that
    /// takes no tick.
    @discardableResult
    public func schedule(
        after delay: Duration,
        every period: Duration? = nil,
        leeway: Duration = .zero,
        missedTicks: MissedTickPolicy = .skip,
        handler: @escaping @Sendable () -> Void
    ) -> Bool {
        self.schedule(after: delay, every: period, leeway: leeway, missedTicks: missedTicks) { _ in handler() }
    }

    /// Fires `handler` at `deadline` and then every `period`.
    ///
    /// The form for an absolute deadline, and for the boottime and wall clocks, whose
    /// instants `DispatchTime` cannot express.
    ///
    /// - Returns: `false`, doing nothing, unless the timer is idle or cancelled, or when
    ///   ``start(at:every:leeway:missedTicks:handler:)-(_,_,_,_,(Tick)->Void)`` would throw.
    @discardableResult
    public func schedule(
        at deadline: TimerInstant,
        every period: Duration? = nil,
        leeway: Duration = .zero,
        missedTicks: MissedTickPolicy = .skip,
        handler: @escaping @Sendable (Tick) -> Void
    ) -> Bool {
        guard deadline.clock == self.clock,
            let schedule = try? TimerCore.schedule(
                at: deadline.nanoseconds, every: period, leeway: leeway, missedTicks: missedTicks)
        else { return false }
        return self.arm(schedule, handler: handler)
    }

    /// ``schedule(at:every:leeway:missedTicks:handler:)-(_,_,_,_,(Tick)->Void)`` with a handler that takes
    /// no tick.
    @discardableResult
    public func schedule(
        at deadline: TimerInstant,
        every period: Duration? = nil,
        leeway: Duration = .zero,
        missedTicks: MissedTickPolicy = .skip,
        handler: @escaping @Sendable () -> Void
    ) -> Bool {
        self.schedule(at: deadline, every: period, leeway: leeway, missedTicks: missedTicks) { _ in handler() }
    }

    /// Schedules as ``schedule(after:every:leeway:missedTicks:handler:)-(_,_,_,_,(Tick)->Void)`` does, and
    /// says why when it cannot.
    ///
    /// - Returns: `false`, doing nothing, when the timer is running or suspended.
    /// - Throws: ``TimerError/invalidArgument`` for a period that is not positive;
    ///   ``TimerError/engineShutDown`` when the backend can arm no more; `ENOMEM` when
    ///   memory ran out.
    @discardableResult
    public func start(
        after delay: Duration,
        every period: Duration? = nil,
        leeway: Duration = .zero,
        missedTicks: MissedTickPolicy = .skip,
        handler: @escaping @Sendable (Tick) -> Void
    ) throws(TimerError) -> Bool {
        let schedule = try self.core.schedule(after: delay, every: period, leeway: leeway, missedTicks: missedTicks)
        return try self.core.schedule(schedule, handler: handler)
    }

    /// ``start(after:every:leeway:missedTicks:handler:)-(_,_,_,_,(Tick)->Void)`` with a handler that takes
    /// no tick.
    @discardableResult
    public func start(
        after delay: Duration,
        every period: Duration? = nil,
        leeway: Duration = .zero,
        missedTicks: MissedTickPolicy = .skip,
        handler: @escaping @Sendable () -> Void
    ) throws(TimerError) -> Bool {
        try self.start(after: delay, every: period, leeway: leeway, missedTicks: missedTicks) { _ in handler() }
    }

    /// Schedules as ``schedule(at:every:leeway:missedTicks:handler:)-(_,_,_,_,(Tick)->Void)`` does, and says
    /// why when it cannot.
    ///
    /// - Returns: `false`, doing nothing, when the timer is running or suspended.
    /// - Throws: ``TimerError/invalidArgument`` for a deadline on another clock than the
    ///   timer's or a period that is not positive; ``TimerError/engineShutDown`` when the
    ///   backend can arm no more; `ENOMEM` when memory ran out.
    @discardableResult
    public func start(
        at deadline: TimerInstant,
        every period: Duration? = nil,
        leeway: Duration = .zero,
        missedTicks: MissedTickPolicy = .skip,
        handler: @escaping @Sendable (Tick) -> Void
    ) throws(TimerError) -> Bool {
        try self.check(deadline, in: "start")
        let schedule = try TimerCore.schedule(
            at: deadline.nanoseconds, every: period, leeway: leeway, missedTicks: missedTicks)
        return try self.core.schedule(schedule, handler: handler)
    }

    /// ``start(at:every:leeway:missedTicks:handler:)-(_,_,_,_,(Tick)->Void)`` with a handler that takes no
    /// tick.
    @discardableResult
    public func start(
        at deadline: TimerInstant,
        every period: Duration? = nil,
        leeway: Duration = .zero,
        missedTicks: MissedTickPolicy = .skip,
        handler: @escaping @Sendable () -> Void
    ) throws(TimerError) -> Bool {
        try self.start(at: deadline, every: period, leeway: leeway, missedTicks: missedTicks) { _ in handler() }
    }

    /// Moves a running or suspended timer to fire `delay` from now and then every `period`,
    /// keeping its handler and leeway.
    ///
    /// Once this returns, no handler for the old schedule starts. A suspended timer stays
    /// suspended and follows the new schedule once resumed (its periods that passed
    /// meanwhile skipped).
    ///
    /// - Parameters:
    ///   - delay: How long from now the next firing is; zero or negative fires at once.
    ///   - period: The distance between firings, or `nil` for a one-shot.
    /// - Returns: `false`, doing nothing, for an idle or cancelled timer or a period that is
    ///   not positive.
    @discardableResult
    public func reschedule(after delay: Duration, every period: Duration? = nil) -> Bool {
        self.core.reschedule(after: delay, every: period)
    }

    /// Moves a running or suspended timer to fire at `deadline` and then every `period`,
    /// keeping its handler and leeway.
    ///
    /// Once this returns, no handler for the old schedule starts. A suspended timer stays
    /// suspended and follows the new schedule once resumed.
    ///
    /// - Parameters:
    ///   - deadline: The next deadline, on the timer's clock.
    ///   - period: The distance between firings, or `nil` for a one-shot.
    /// - Returns: `false`, doing nothing, for an idle or cancelled timer, a deadline on
    ///   another clock, or a period that is not positive.
    @discardableResult
    public func reschedule(at deadline: TimerInstant, every period: Duration? = nil) -> Bool {
        guard (try? self.check(deadline, in: "reschedule")) != nil else { return false }
        return self.core.reschedule(at: deadline.nanoseconds, every: period)
    }

    /// Refuses a deadline read on another clock than the timer's.
    private func check(_ deadline: TimerInstant, in operation: String) throws(TimerError) {
        guard deadline.clock != self.clock else { return }
        throw .wrongClock(deadline.clock, expected: self.clock, in: operation)
    }
}
