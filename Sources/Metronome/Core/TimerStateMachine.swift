/// The life cycle of one timer: which events are accepted in which state, and what the owner
/// must do about each.
///
/// The machine is a pure value: no clock, lock, backend or C call. `SafeDispatchTimer` asks it
/// under its lock and carries out the returned action before unlocking, so no other event
/// comes between a decision and its arming. Which arming a firing comes from is the owner's
/// to check: it records the id of each arming it makes and passes on only the firings of
/// the current one.
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
        /// Scheduled and armed.
        case running(TimerSchedule)
        /// Scheduled but not armed; resuming arms it.
        case suspended(TimerSchedule)
        /// Cancelled by the caller; may be scheduled again.
        case cancelled

        /// The schedule of a running or suspended timer, otherwise `nil`.
        var schedule: TimerSchedule? {
            switch self {
            case .running(let schedule), .suspended(let schedule): schedule
            case .idle, .cancelled: nil
            }
        }
    }

    // The schedule is kept apart and the flags in one byte, last, so that the machine packs
    // into a timer's state with no padding: it is most of an armed timer's memory.

    /// The schedule of a running or suspended timer, apart; the period is 0 for a one-shot.
    private var periodNanoseconds: Int64 = 0

    /// The latest deadline of the current schedule a handler was run for, `.min` before the
    /// first. Resuming never arms at or before it, whatever `now` the caller read: a clock
    /// read before a tick was delivered must not bring that tick's deadline back.
    private var lastDelivered = Int64.min

    private var deadlineNanoseconds: Int64 = 0
    private var leewayNanoseconds: Int64 = 0

    /// The phase, whether a refused arming leaves the timer idle, whether it was closed, and
    /// the schedule's missed-tick policy.
    private var flags = Flags()

    private struct Flags {
        private var bits: UInt8 = 0

        enum Phase: UInt8 {
            case idle = 0
            case running, suspended, cancelled
        }

        var phase: Phase {
            get { Phase(rawValue: self.bits & 0b11)! }
            set { self.bits = self.bits & ~0b11 | newValue.rawValue }
        }

        /// Whether a refused arming leaves the timer idle: only when `schedule` found it idle
        /// (a refused schedule does nothing). Otherwise it ends cancelled: a refused schedule
        /// found it so, and a refused reschedule or resume has lost its previous arming.
        var idleIfRefused: Bool {
            get { self.bits & 0b100 != 0 }
            set { self.bits = newValue ? self.bits | 0b100 : self.bits & ~0b100 }
        }

        /// Set by ``TimerStateMachine/close()``: the timer never arms again.
        var isClosed: Bool {
            get { self.bits & 0b1000 != 0 }
            set { self.bits = newValue ? self.bits | 0b1000 : self.bits & ~0b1000 }
        }

        var missedTicks: MissedTickPolicy {
            get {
                switch self.bits >> 4 & 0b11 {
                case 1: .burst
                case 2: .delay
                default: .skip
                }
            }
            set {
                let code: UInt8
                switch newValue {
                case .skip: code = 0
                case .burst: code = 1
                case .delay: code = 2
                }
                self.bits = self.bits & ~0b11_0000 | code << 4
            }
        }
    }

    /// The current state.
    var state: State {
        switch self.flags.phase {
        case .idle: .idle
        case .running: .running(self.schedule)
        case .suspended: .suspended(self.schedule)
        case .cancelled: .cancelled
        }
    }

    /// Whether the timer is running: what a firing asks, without building its schedule.
    var isRunning: Bool { self.flags.phase == .running }

    /// Whether the timer is idle or cancelled: it runs no handler then.
    var isStopped: Bool {
        switch self.flags.phase {
        case .idle, .cancelled: true
        case .running, .suspended: false
        }
    }

    /// The leeway of a running or suspended timer's schedule, which a reschedule keeps.
    var leeway: Int64? { self.isStopped ? nil : self.leewayNanoseconds }

    /// The missed-tick policy of a running or suspended timer's schedule.
    var missedTicks: MissedTickPolicy? { self.isStopped ? nil : self.flags.missedTicks }

    private var schedule: TimerSchedule {
        TimerSchedule(
            validDeadline: self.deadlineNanoseconds, period: self.periodNanoseconds, leeway: self.leewayNanoseconds,
            missedTicks: self.flags.missedTicks)
    }

    private mutating func keep(_ schedule: TimerSchedule, as phase: Flags.Phase) {
        self.deadlineNanoseconds = schedule.deadlineNanoseconds
        self.periodNanoseconds = schedule.periodOrZero
        self.leewayNanoseconds = schedule.leewayNanoseconds
        self.flags.missedTicks = schedule.missedTicks
        self.flags.phase = phase
    }

    /// What the owner must do after ``schedule(_:)``.
    enum ScheduleAction: Equatable {
        /// Arm this schedule.
        case arm(TimerSchedule)
        /// The timer is already scheduled, or closed; nothing changed (use ``reschedule(_:)``).
        case reject
    }

    /// Schedules an idle or cancelled timer, unless it was closed.
    @inline(__always)
    mutating func schedule(_ schedule: TimerSchedule) -> ScheduleAction {
        switch self.flags.phase {
        case .idle where !self.flags.isClosed, .cancelled where !self.flags.isClosed:
            self.flags.idleIfRefused = self.flags.phase == .idle
            self.start(schedule)
            return .arm(schedule)
        case .idle, .cancelled, .running, .suspended:
            return .reject
        }
    }

    /// What the owner must do after ``reschedule(_:)``.
    enum RescheduleAction: Equatable {
        /// Arm the new schedule in place of the running one.
        case arm(TimerSchedule)
        /// The new schedule is stored; the timer stays suspended and ``resume(now:)`` arms it.
        case keepSuspended
        /// The timer is not scheduled; nothing changed (use ``schedule(_:)``).
        case reject
    }

    /// Replaces the schedule of a running or suspended timer.
    @inline(__always)
    mutating func reschedule(_ schedule: TimerSchedule) -> RescheduleAction {
        switch self.flags.phase {
        case .running:
            self.flags.idleIfRefused = false
            self.start(schedule)
            return .arm(schedule)
        case .suspended:
            self.keep(schedule, as: .suspended)
            self.lastDelivered = .min
            return .keepSuspended
        case .idle, .cancelled:
            return .reject
        }
    }

    /// What the owner must do after ``suspend()``, ``cancel()`` or ``close()``.
    enum StopAction: Equatable {
        /// Disarm the running arming.
        case disarm
        /// Nothing was armed (a suspended timer cancelled); report success.
        case acknowledge
        /// Nothing changed.
        case reject
    }

    /// Suspends a running timer, keeping its schedule for ``resume(now:)``.
    mutating func suspend() -> StopAction {
        switch self.flags.phase {
        case .running:
            self.flags.phase = .suspended
            return .disarm
        case .idle, .suspended, .cancelled:
            return .reject
        }
    }

    /// What the owner must do after ``resume(now:)``.
    enum ResumeAction: Equatable {
        /// Arm the resumed schedule.
        case arm(TimerSchedule)
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
        switch self.flags.phase {
        case .suspended:
            self.flags.idleIfRefused = false
            let resumed = self.schedule.resumed(at: max(now, self.lastDelivered))
            self.keep(resumed, as: .running)
            return .arm(resumed)
        case .idle, .running, .cancelled:
            return .reject
        }
    }

    /// Cancels a running or suspended timer.
    @inline(__always)
    mutating func cancel() -> StopAction {
        switch self.flags.phase {
        case .running:
            self.flags.phase = .cancelled
            return .disarm
        case .suspended:
            self.flags.phase = .cancelled
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
        self.flags.isClosed = true
        return self.cancel()
    }

    /// The backend stopped for good (an engine shut down) and dropped every arming itself: a
    /// running timer is cancelled, with nothing left to disarm. A suspended timer stays
    /// suspended until its resume is refused.
    mutating func abandon() {
        if self.flags.phase == .running { self.flags.phase = .cancelled }
    }

    /// The backend refused the arming the last event asked for (an engine shut down).
    mutating func refused() {
        self.flags.phase = self.flags.idleIfRefused ? .idle : .cancelled
    }

    /// What the owner must do after ``fired(scheduled:)``.
    enum FiredAction: Equatable {
        /// Run the user's handler.
        case runHandler
        /// The timer is not running; drop the firing.
        case ignore
    }

    /// Reports that the current arming fired for the deadline `scheduled`, whatever deadline
    /// its backend reports.
    ///
    /// A one-shot timer that fires is finished and becomes idle, so it can be scheduled again;
    /// a repeating timer stays running.
    @inline(__always)
    mutating func fired(scheduled: Int64) -> FiredAction {
        guard self.flags.phase == .running else { return .ignore }
        if self.periodNanoseconds != 0 {
            self.lastDelivered = scheduled
        } else {
            self.flags.phase = .idle
        }
        return .runHandler
    }

    /// Enters `running` for a new schedule, whose deliveries start afresh.
    private mutating func start(_ schedule: TimerSchedule) {
        self.keep(schedule, as: .running)
        self.lastDelivered = .min
    }
}

@available(*, unavailable)
extension TimerStateMachine: Sendable {}
