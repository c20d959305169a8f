/// The life cycle of one timer: which events are accepted in which state, and what the owner
/// must do about each.
///
/// The machine is a pure value: no clock, lock, backend or C call. `SafeDispatchTimer` asks it
/// under its lock and carries out the returned action after unlocking.
///
/// Every arming carries a *generation*. A fire is decided on the firing thread, so it can be
/// in flight while another thread cancels, suspends or reschedules the timer; the callback
/// then arrives carrying the generation it was armed with, which no longer matches, and
/// ``fired(generation:scheduled:)`` returns ``FiredAction/ignore``. Each transition into `running` or
/// `suspended` takes a new generation, so an old callback can never match a later arming.
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
        /// Armed with the backend under `generation`.
        case running(TimerSchedule, generation: UInt64)
        /// Scheduled but not armed; resuming arms it under a new generation.
        case suspended(TimerSchedule, generation: UInt64)
        /// Cancelled by the caller; may be scheduled again.
        case cancelled
    }

    /// The current state.
    private(set) var state: State = .idle

    /// The last generation handed out; only ever increases (wrapping after 2^64 armings).
    private var lastGeneration: UInt64 = 0

    /// The latest deadline of the current schedule a handler was run for. Resuming never
    /// arms at or before it, whatever `now` the caller read: a clock read before a tick was
    /// delivered must not bring that tick's deadline back.
    private var lastDelivered: Int64?

    /// The generation of the current arming while running or suspended, otherwise `nil`.
    var generation: UInt64? {
        switch self.state {
        case .running(_, let generation), .suspended(_, let generation):
            return generation
        case .idle, .cancelled:
            return nil
        }
    }

    /// What the owner must do after ``schedule(_:)``.
    enum ScheduleAction: Equatable {
        /// Arm the backend with the schedule, tagging callbacks with the generation.
        case arm(TimerSchedule, generation: UInt64)
        /// The timer is already scheduled; nothing changed (use ``reschedule(_:)``).
        case reject
    }

    /// Schedules an idle or cancelled timer.
    mutating func schedule(_ schedule: TimerSchedule) -> ScheduleAction {
        switch self.state {
        case .idle, .cancelled:
            let generation = self.nextGeneration()
            self.state = .running(schedule, generation: generation)
            self.lastDelivered = nil
            return .arm(schedule, generation: generation)
        case .running, .suspended:
            return .reject
        }
    }

    /// What the owner must do after ``reschedule(_:)``.
    enum RescheduleAction: Equatable {
        /// Re-arm the backend with the new schedule under the new generation.
        case arm(TimerSchedule, generation: UInt64)
        /// The new schedule is stored; the timer stays suspended and ``resume(now:)`` arms it.
        case keepSuspended
        /// The timer is not scheduled; nothing changed (use ``schedule(_:)``).
        case reject
    }

    /// Replaces the schedule of a running or suspended timer.
    mutating func reschedule(_ schedule: TimerSchedule) -> RescheduleAction {
        switch self.state {
        case .running:
            let generation = self.nextGeneration()
            self.state = .running(schedule, generation: generation)
            self.lastDelivered = nil
            return .arm(schedule, generation: generation)
        case .suspended:
            // A new generation here too: a fire of the old arming may still be in flight.
            self.state = .suspended(schedule, generation: self.nextGeneration())
            self.lastDelivered = nil
            return .keepSuspended
        case .idle, .cancelled:
            return .reject
        }
    }

    /// What the owner must do after ``suspend()``.
    enum SuspendAction: Equatable {
        /// Disarm the backend.
        case disarm
        /// The timer is not running; nothing changed.
        case reject
    }

    /// Suspends a running timer, keeping its schedule for ``resume(now:)``.
    mutating func suspend() -> SuspendAction {
        switch self.state {
        case .running(let schedule, _):
            self.state = .suspended(schedule, generation: self.nextGeneration())
            return .disarm
        case .idle, .suspended, .cancelled:
            return .reject
        }
    }

    /// What the owner must do after ``resume(now:)``.
    enum ResumeAction: Equatable {
        /// Arm the backend with the resumed schedule under the new generation.
        case arm(TimerSchedule, generation: UInt64)
        /// The timer is not suspended; nothing changed.
        case reject
    }

    /// Resumes a suspended timer at `now`.
    ///
    /// Periods that passed while suspended are skipped rather than reported as missed, and a
    /// one-shot whose deadline passed fires at once (see ``TimerSchedule/resumed(at:)``).
    /// The next deadline also lies after the last one delivered, so a `now` read before
    /// that delivery cannot repeat it.
    mutating func resume(now: Int64) -> ResumeAction {
        switch self.state {
        case .suspended(let schedule, _):
            let resumed = schedule.resumed(at: max(now, self.lastDelivered ?? now))
            let generation = self.nextGeneration()
            self.state = .running(resumed, generation: generation)
            return .arm(resumed, generation: generation)
        case .idle, .running, .cancelled:
            return .reject
        }
    }

    /// What the owner must do after ``cancel()``.
    enum CancelAction: Equatable {
        /// Disarm the backend.
        case disarm
        /// The timer was suspended, so nothing is armed; report success.
        case acknowledge
        /// The timer is not scheduled; nothing changed.
        case reject
    }

    /// Cancels a running or suspended timer.
    mutating func cancel() -> CancelAction {
        switch self.state {
        case .running:
            self.state = .cancelled
            return .disarm
        case .suspended:
            self.state = .cancelled
            return .acknowledge
        case .idle, .cancelled:
            return .reject
        }
    }

    /// What the owner must do after ``fired(generation:scheduled:)``.
    enum FiredAction: Equatable {
        /// Run the user's handler.
        case runHandler
        /// The callback is stale or the timer is not running; drop it.
        case ignore
    }

    /// Reports that the backend fired an arming tagged with `generation`, for the deadline
    /// `scheduled`.
    ///
    /// A one-shot timer that fires is finished and becomes idle, so it can be scheduled again;
    /// a repeating timer stays running.
    mutating func fired(generation: UInt64, scheduled: Int64) -> FiredAction {
        switch self.state {
        case .running(let schedule, let current) where current == generation:
            if schedule.isRepeating {
                self.lastDelivered = scheduled
            } else {
                self.state = .idle
            }
            return .runHandler
        case .running, .idle, .suspended, .cancelled:
            return .ignore
        }
    }

    private mutating func nextGeneration() -> UInt64 {
        self.lastGeneration &+= 1
        return self.lastGeneration
    }
}

@available(*, unavailable)
extension TimerStateMachine: Sendable {}
