/// The life cycle of one timer: which events are accepted in which state, and what the owner
/// must do about each.
///
/// The machine is a pure value: no clock, lock, backend or C call. `SafeDispatchTimer` asks it
/// under its lock and carries out the returned action after unlocking.
///
/// Arming takes two steps outside the lock (reserve an arming from the firing seam, then
/// start it), so another thread may cancel, suspend or reschedule in between. Every arming
/// action therefore carries a *generation*; the owner reports back with it
/// (``armed(generation:arming:)``, ``refused(generation:)``), and a report for a generation
/// that was overtaken is answered with "disarm it". Firings carry the id of their arming,
/// and ``fired(arming:scheduled:)`` runs a handler only for the current one, so a firing in
/// flight during a cancel, suspend or reschedule is recognised as stale and dropped. (A
/// one-shot pushed later may keep its arming: that arming's firing before the new deadline
/// re-arms it instead, see ``reschedule(_:canKeepArming:)``.)
///
/// Misuse by the caller (suspending twice, resuming a running timer, cancelling twice,
/// rescheduling a cancelled timer) is not an error: the event returns `.reject` and leaves the
/// state unchanged. This is what keeps us clear of libdispatch's "over-resume" and
/// "release of a suspended object" crashes. The full transition table is in the
/// <doc:StateMachine> article.
struct TimerStateMachine {
    /// Where the timer is in its life cycle.
    enum State: Equatable {
        /// Never scheduled, or a one-shot that has fired; may be scheduled.
        case idle
        /// Scheduled and armed, or being armed: the arming action is the last generation
        /// handed out, and `arming` its id once the seam has reserved it.
        case running(TimerSchedule, arming: UInt64?)
        /// Scheduled but not armed; resuming arms it.
        case suspended(TimerSchedule)
        /// Cancelled by the caller; may be scheduled again.
        case cancelled
    }

    // Ordered so that no field leaves padding: the machine is most of an armed timer's
    // locked state, and every byte here is a megabyte at a million timers.

    /// The current state.
    private(set) var state: State = .idle

    /// Whether a refused arming leaves the timer idle: only when `schedule` found it idle
    /// (a refused schedule does nothing). Otherwise it ends cancelled: a refused schedule
    /// found it so, and a refused reschedule or resume has lost its previous arming.
    private var idleIfRefused = false

    /// Set by ``close()``: the timer never arms again.
    private var isClosed = false

    /// The running arming was kept by ``RescheduleAction/keepArmed`` and is for an earlier
    /// deadline than the schedule's; cleared by every new arming. Only then does a firing
    /// before the deadline re-arm: a backend's tick is otherwise taken as it comes.
    private var isArmingKept = false

    /// The last generation handed out, which names the current arming action; only ever
    /// increases (wrapping after 2^64 armings).
    private var lastGeneration: UInt64 = 0

    /// What the current schedule's firings left behind. One field for two facts that are
    /// never needed at once: a repeating timer's last delivery matters only while it is
    /// suspended, a fired one-shot's arming only while it is idle.
    private var past = Past.delivered(.min)

    private enum Past {
        /// The latest deadline of the current schedule a handler was run for, `.min`
        /// before the first. Resuming never arms at or before it, whatever `now` the caller
        /// read: a clock read before a tick was delivered must not bring that tick's
        /// deadline back.
        case delivered(Int64)
        /// The arming of a one-shot that fired: the seam still holds it until the next
        /// schedule or the close disarms it.
        case spent(UInt64)
    }

    private var lastDelivered: Int64 {
        guard case .delivered(let deadline) = self.past else { return .min }
        return deadline
    }

    /// Forgets what the last schedule's firings left, returning a fired one-shot's arming
    /// for the owner to disarm.
    private mutating func forgetPast() -> UInt64? {
        defer { self.past = .delivered(.min) }
        guard case .spent(let arming) = self.past else { return nil }
        return arming
    }

    /// What the owner must do to arm a schedule.
    struct Arm: Equatable {
        /// The schedule to start.
        let schedule: TimerSchedule
        /// Names this arming in ``armed(generation:arming:)`` and ``refused(generation:)``.
        let generation: UInt64
        /// The arming this one replaces, to disarm first: the running one a reschedule
        /// moves, or a fired one-shot's, which the seam still holds.
        var disarming: UInt64? = nil
    }

    /// What the owner must do after ``schedule(_:)``.
    enum ScheduleAction: Equatable {
        /// Reserve and start an arming.
        case arm(Arm)
        /// The timer is already scheduled; nothing changed (use ``reschedule(_:)``).
        case reject
    }

    /// Schedules an idle or cancelled timer, unless it was closed.
    mutating func schedule(_ schedule: TimerSchedule) -> ScheduleAction {
        switch self.state {
        case .idle where !self.isClosed, .cancelled where !self.isClosed:
            self.idleIfRefused = self.state == .idle
            return .arm(self.arming(schedule, disarming: self.forgetPast()))
        case .idle, .cancelled, .running, .suspended:
            return .reject
        }
    }

    /// What the owner must do after ``reschedule(_:)``.
    enum RescheduleAction: Equatable {
        /// Disarm the previous arming, if it had been reserved, then arm the new schedule.
        case arm(Arm)
        /// The new schedule is stored; the timer stays suspended and ``resume(now:)`` arms it.
        case keepSuspended
        /// The new schedule is stored and the running arming kept: a one-shot moved no
        /// earlier fires first at its old deadline, and that firing arms the rest
        /// (``fired(arming:scheduled:)``). A deadline pushed later on every request costs
        /// no backend call, only one re-arm when the old deadline comes.
        case keepArmed
        /// The timer is not scheduled; nothing changed (use ``schedule(_:)``).
        case reject
    }

    /// Replaces the schedule of a running or suspended timer.
    ///
    /// - Parameter canKeepArming: Whether the seam is live and refuses an arming only once
    ///   it has stopped for good, which cancels the timer anyway (``abandon()``): a one-shot
    ///   moved later may then keep its arming (``RescheduleAction/keepArmed``), since no
    ///   refusal the reschedule could have reported is lost.
    ///
    /// Inlined, so that a caller that only asks whether the timer took the schedule never
    /// builds the action (with its arming) in memory.
    @inline(__always)
    mutating func reschedule(_ schedule: TimerSchedule, canKeepArming: Bool = false) -> RescheduleAction {
        switch self.state {
        case .running(let current, let previous?) where canKeepArming && Self.firesInTime(current, for: schedule):
            self.state = .running(schedule, arming: previous)
            self.idleIfRefused = false
            self.isArmingKept = true
            return .keepArmed
        case .running(_, let previous):
            self.idleIfRefused = false
            _ = self.forgetPast()
            return .arm(self.arming(schedule, disarming: previous))
        case .suspended:
            self.state = .suspended(schedule)
            _ = self.forgetPast()
            return .keepSuspended
        case .idle, .cancelled:
            return .reject
        }
    }

    /// Whether an arming for the one-shot `current` fires in time to arm the one-shot
    /// `next` on its firing: `next`'s window opens no earlier and closes no earlier. An
    /// arming kept through several such reschedules is for an earlier deadline still.
    private static func firesInTime(_ current: TimerSchedule, for next: TimerSchedule) -> Bool {
        !current.isRepeating && !next.isRepeating
            && next.deadlineNanoseconds >= current.deadlineNanoseconds
            && next.leewayNanoseconds >= current.leewayNanoseconds
    }

    /// What the owner must do after ``suspend()`` or ``cancel()``.
    enum StopAction: Equatable {
        /// Disarm this arming, if one had been reserved.
        case disarm(UInt64?)
        /// Nothing was armed (a suspended timer cancelled); report success.
        case acknowledge
        /// Nothing changed.
        case reject
    }

    /// Suspends a running timer, keeping its schedule for ``resume(now:)``.
    mutating func suspend() -> StopAction {
        switch self.state {
        case .running(let schedule, let arming):
            self.state = .suspended(schedule)
            return .disarm(arming)
        case .idle, .suspended, .cancelled:
            return .reject
        }
    }

    /// What the owner must do after ``resume(now:)``.
    enum ResumeAction: Equatable {
        /// Reserve and start an arming for the resumed schedule.
        case arm(Arm)
        /// The timer is not suspended; nothing changed.
        case reject
    }

    /// Resumes a suspended timer at `now`.
    ///
    /// Periods that passed while suspended are skipped rather than reported as missed, and a
    /// one-shot whose deadline passed keeps it (see ``TimerSchedule/resumed(at:)``).
    /// The next deadline also lies after the last one delivered, so a `now` read before
    /// that delivery cannot repeat it.
    mutating func resume(now: Int64) -> ResumeAction {
        switch self.state {
        case .suspended(let schedule):
            self.idleIfRefused = false
            return .arm(self.arming(schedule.resumed(at: max(now, self.lastDelivered))))
        case .idle, .running, .cancelled:
            return .reject
        }
    }

    /// Cancels a running or suspended timer.
    mutating func cancel() -> StopAction {
        switch self.state {
        case .running(_, let arming):
            self.state = .cancelled
            return .disarm(arming)
        case .suspended:
            self.state = .cancelled
            return .acknowledge
        case .idle, .cancelled:
            return .reject
        }
    }

    /// Cancels the timer for good: its owner is gone, or gave it up from another thread.
    ///
    /// Closing comes first and wins whichever way it races a schedule: a schedule after it is
    /// refused, and one before it is cancelled. That is what lets an owner hand a timer's
    /// cancellation to another thread without re-checking after arming.
    mutating func close() -> StopAction {
        self.isClosed = true
        if let spent = self.forgetPast() { return .disarm(spent) }
        return self.cancel()
    }

    /// The seam stopped for good (an engine shut down) and drops every arming itself: a
    /// running timer is cancelled, with nothing left to disarm.
    ///
    /// A suspended timer holds no arming and stays suspended until its resume is refused;
    /// an arming still being reserved then finds the timer overtaken, as by a cancel.
    mutating func abandon() {
        if case .running = self.state { self.state = .cancelled }
    }

    /// The seam reserved `arming` for the arming action `generation`. Returns whether to
    /// start it: `false` means another transition overtook this one, and the owner disarms
    /// the arming instead.
    mutating func armed(generation: UInt64, arming: UInt64) -> Bool {
        guard generation == self.lastGeneration, case .running(let schedule, nil) = self.state else { return false }
        self.state = .running(schedule, arming: arming)
        return true
    }

    /// The seam refused the arming action `generation` (an engine shut down). Returns whether
    /// that stopped the timer; `false` means another transition had overtaken it. Either way
    /// the owner disarms an arming it reserved.
    mutating func refused(generation: UInt64) -> Bool {
        guard generation == self.lastGeneration, case .running = self.state else { return false }
        self.state = self.idleIfRefused ? .idle : .cancelled
        return true
    }

    /// What the owner must do after ``fired(arming:scheduled:)``.
    enum FiredAction: Equatable {
        /// Run the user's handler.
        case runHandler
        /// The firing came for a deadline a reschedule has since moved later
        /// (``RescheduleAction/keepArmed``): arm the rest, disarming the fired arming.
        case arm(Arm)
        /// The firing is stale or the timer is not running; drop it.
        case ignore
    }

    /// Whether `arming` is the current one, whose firings ``fired(arming:scheduled:)`` acts
    /// on. One that is not never is again.
    func isCurrent(arming: UInt64) -> Bool {
        guard case .running(_, let current?) = self.state else { return false }
        return current == arming
    }

    /// Reports that `arming` fired for the deadline `scheduled`.
    ///
    /// A one-shot timer that fires is finished and becomes idle, so it can be scheduled again;
    /// a repeating timer stays running. An arming kept by a later reschedule that fires
    /// before the current deadline is armed anew for the rest instead; any other firing of
    /// the current arming runs the handler, whatever deadline its backend reports.
    mutating func fired(arming: UInt64, scheduled: Int64) -> FiredAction {
        guard case .running(let schedule, arming?) = self.state else { return .ignore }
        if schedule.isRepeating {
            self.past = .delivered(scheduled)
        } else if self.isArmingKept, scheduled < schedule.deadlineNanoseconds {
            return .arm(self.arming(schedule, disarming: arming))
        } else {
            self.state = .idle
            self.past = .spent(arming)
        }
        return .runHandler
    }

    /// Enters `running` for `schedule` under a new generation, to be armed.
    private mutating func arming(_ schedule: TimerSchedule, disarming previous: UInt64? = nil) -> Arm {
        self.lastGeneration &+= 1
        self.isArmingKept = false
        self.state = .running(schedule, arming: nil)
        return Arm(schedule: schedule, generation: self.lastGeneration, disarming: previous)
    }
}

extension TimerStateMachine.State {
    /// The state as ``SafeDispatchTimer`` reports it: an arming in progress is running.
    var `public`: SafeDispatchTimer.State {
        switch self {
        case .idle: .idle
        case .running: .running
        case .suspended: .suspended
        case .cancelled: .cancelled
        }
    }
}

@available(*, unavailable)
extension TimerStateMachine: Sendable {}
