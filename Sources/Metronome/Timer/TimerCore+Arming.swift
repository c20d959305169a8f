@preconcurrency import Dispatch

/// The shell around a timer's core: decides under its lock, and arms, moves or disarms
/// through the seam before unlocking, with one seam call that takes only the seam's own
/// locks; a retirement and anything that may call back into the timer run unlocked.
extension TimerCore {
    var schedule: TimerSchedule? {
        self.withLockedStorage { $0.machine.state.schedule }
    }

    var state: SafeDispatchTimer.State {
        self.withLockedStorage { $0.machine.state.public }
    }

    func schedule(
        deadline: DispatchTime, repeating: DispatchTimeInterval, leeway: DispatchTimeInterval,
        missedTicks: MissedTickPolicy = .skip
    ) -> TimerSchedule? {
        guard case .nanoseconds(let leeway)? = DispatchConversions.interval(leeway),
            let period = DispatchConversions.interval(repeating)
        else { return nil }
        return Self.schedule(
            start: self.nanoseconds(of: deadline), period: period.nanoseconds, leeway: leeway, missedTicks: missedTicks)
    }

    /// A `DispatchTime` on this timer's clock. Inlined: on the monotonic clock it is one
    /// conversion, and a call would cost more.
    @inline(__always)
    private func nanoseconds(of deadline: DispatchTime) -> Int64 {
        DispatchConversions.deadline(deadline, on: self.clock) { _ in self.now() }
    }

    private static func schedule(start: Int64, period: Int64?, leeway: Int64, missedTicks: MissedTickPolicy)
        -> TimerSchedule?
    {
        // A window past the end of time (`.distantFuture` means "never") is cut short, never
        // moved earlier: late, never early.
        TimerSchedule(
            deadlineNanoseconds: start, periodNanoseconds: period,
            leewayNanoseconds: min(leeway, .max - max(start, 0)), missedTicks: missedTicks)
    }

    /// Schedules an idle or cancelled timer: `false` when its state refuses; throws what
    /// the backend refused.
    func schedule(_ schedule: TimerSchedule, handler: @escaping @Sendable (Tick) -> Void) throws(TimerError) -> Bool {
        try self.withLockedStorage { (storage) throws(TimerError) -> Bool in
            guard case .arm(let schedule) = storage.machine.schedule(schedule) else { return false }
            storage.handler = TimerState.Handler(run: handler)
            try self.arm(schedule, &storage)
            return true
        }
    }

    func reschedule(deadline: DispatchTime, repeating: DispatchTimeInterval) -> Bool {
        guard let period = DispatchConversions.interval(repeating) else { return false }
        // Read outside the lock: a backend's clock may take a lock of its own.
        let start = self.nanoseconds(of: deadline)
        return self.reschedule { leeway, missedTicks in
            Self.schedule(start: start, period: period.nanoseconds, leeway: leeway, missedTicks: missedTicks)
        }
    }

    /// The schedule of a `Duration`-family call, by the rules every type follows: a delay
    /// or deadline that has passed fires at once, a negative leeway is none, a span past
    /// `Int64` nanoseconds saturates (a deadline there never comes), a leeway longer than
    /// the period is cut to it, and only a period that is not positive is refused.
    func schedule(
        after delay: Duration, every period: Duration?, leeway: Duration, missedTicks: MissedTickPolicy = .skip
    ) throws(TimerError) -> TimerSchedule {
        try Self.schedule(at: self.deadline(after: delay), every: period, leeway: leeway, missedTicks: missedTicks)
    }

    func reschedule(after delay: Duration, every period: Duration?) -> Bool {
        self.reschedule(at: self.deadline(after: delay), every: period)
    }

    func reschedule(at deadline: Int64, every period: Duration?) -> Bool {
        self.reschedule { leeway, missedTicks in
            try? Self.schedule(at: deadline, every: period, leeway: .nanoseconds(leeway), missedTicks: missedTicks)
        }
    }

    /// `delay` from now on this timer's clock; a negative delay is now.
    private func deadline(after delay: Duration) -> Int64 {
        self.now().addingSaturating(max(delay, .zero).saturatingNanoseconds)
    }

    static func schedule(
        at deadline: Int64, every period: Duration?, leeway: Duration, missedTicks: MissedTickPolicy = .skip
    ) throws(TimerError) -> TimerSchedule {
        // A period under a nanosecond is none in the nanoseconds a schedule holds. In
        // nanoseconds throughout: `Duration`'s own comparisons and constants are calls.
        func refusal() -> TimerError {
            .invalid("period", "must be at least a nanosecond, not \(period ?? .zero)", in: "schedule")
        }
        let periodNanoseconds = period?.saturatingNanoseconds
        if let periodNanoseconds, periodNanoseconds < 1 { throw refusal() }
        // The deadline, leeway and window are made representable, so the schedule is valid.
        let schedule = Self.schedule(
            start: max(deadline, 0), period: periodNanoseconds, leeway: max(leeway.saturatingNanoseconds, 0),
            missedTicks: missedTicks)
        guard let schedule else { throw refusal() }
        return schedule
    }

    /// Moves a running or suspended timer to the schedule `makeSchedule` builds from the
    /// current leeway and missed-tick policy; `nil` rejects the move. A running timer's
    /// arming is moved in place: on the engine a later deadline on the same clock is an
    /// O(1) move in the core.
    private func reschedule(
        _ makeSchedule: (_ leewayNanoseconds: Int64, _ missedTicks: MissedTickPolicy) -> TimerSchedule?
    ) -> Bool {
        self.withLockedStorage { storage in
            guard let leeway = storage.machine.leeway, let missedTicks = storage.machine.missedTicks,
                let schedule = makeSchedule(leeway, missedTicks)
            else { return false }
            switch storage.machine.reschedule(schedule) {
            case .arm(let schedule): return (try? self.arm(schedule, &storage)) != nil
            case .keepSuspended: return true
            case .reject: return false
            }
        }
    }

    func suspend() -> Bool {
        self.withLockedStorage { self.carryOut($0.machine.suspend(), &$0) }
    }

    func resume() -> Bool {
        // Read outside the lock: a backend's clock may take a lock of its own.
        let now = self.now()
        return self.withLockedStorage { storage in
            guard case .arm(let schedule) = storage.machine.resume(now: now) else { return false }
            return (try? self.arm(schedule, &storage)) != nil
        }
    }

    func cancel() -> Bool {
        self.withLockedStorage { self.carryOut($0.machine.cancel(), &$0) }
    }

    func cancelAndWait() {
        _ = self.cancel()
        guard !CurrentHandler.isRunning(for: self) else { return }
        self.waitForHandlers { () -> (HandlerWaiter, DispatchSemaphore) in
            let semaphore = DispatchSemaphore(value: 0)
            return (.blocked(semaphore), semaphore)
        }?.wait()
    }

    /// Also waits for a delivery still on its way to an executor: once this returns, nothing
    /// of the timer's is left to run there, so the executor (an event loop) may be shut
    /// down. The blocking form does not wait for that: called on the executor itself, it
    /// would wait for a job queued behind its own caller.
    func cancelAndAwaitHandlers() async {
        _ = self.cancel()
        let deliveries: Bool
        if case .executor = self.delivery { deliveries = true } else { deliveries = false }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let queued = self.waitForHandlers(includingDeliveries: deliveries) { (.suspended(continuation), true) }
            if queued == nil { continuation.resume() }
        }
    }

    /// Stops firing for good, whatever the state: later schedules are refused.
    func close() {
        self.withLockedStorage { _ = self.carryOut($0.machine.close(), &$0) }
    }

    /// Arms `schedule` in place of the current arming, under the lock, and records the new
    /// arming before any of its firings can look for it. A refusal stops the timer.
    private func arm(_ schedule: TimerSchedule, _ storage: inout TimerState) throws(TimerError) {
        do {
            storage.arming = try self.seamArm(schedule, replacing: storage.arming)
        } catch {
            storage.machine.refused()
            throw error
        }
    }

    private func carryOut(_ stop: TimerStateMachine.StopAction, _ storage: inout TimerState) -> Bool {
        switch stop {
        case .disarm:
            if storage.arming != 0 { self.seamDisarm(storage.arming) }
            return true
        case .acknowledge: return true
        case .reject: return false
        }
    }

    /// Closes the timer for its owner's deinit and retires its arming, unlocked: the
    /// engine's retirement may release this object.
    func ownerGone() {
        let arming = self.withLockedStorage { storage in
            _ = self.carryOut(storage.machine.close(), &storage)
            defer { storage.arming = 0 }
            return storage.arming
        }
        if arming != 0 { self.seamRetire(arming) }
    }
}

extension TimerStateMachine.State {
    /// The state as ``SafeDispatchTimer`` reports it.
    var `public`: SafeDispatchTimer.State {
        switch self {
        case .idle: .idle
        case .running: .running
        case .suspended: .suspended
        case .cancelled: .cancelled
        }
    }
}

/// A timer's calls into the seam that fires it, which its core keeps as an opaque object:
/// every seam is the engine or a public backend's armings, told apart by the object's class
/// and reached without a retain or a dynamic cast.
extension TimerCore {
    /// An idle core fired by `firing`.
    static func make(delivery: HandlerDelivery?, firing: any TimerFiring, clock: TimerClock) -> TimerCore {
        let seam = firing as AnyObject
        return Self.make(
            delivery: delivery, seam: seam,
            seamKind: ObjectIdentifier(type(of: seam)) == ObjectIdentifier(TimerEngine.self),
            clock: clock)
    }

    /// What fires this timer.
    var firing: any TimerFiring {
        self.withSeam {
            $0
        } armings: {
            $0
        }
    }

    /// Calls `engine` or `armings` with the seam, which the core keeps alive meanwhile.
    @inline(__always)
    private func withSeam<Result>(engine: (TimerEngine) -> Result, armings: (BackendArmings) -> Result) -> Result {
        // The kind the core was made with: the engine, or a backend's armings.
        let seam = self.seam
        if self.seamKind {
            return Unmanaged<TimerEngine>.fromOpaque(seam.toOpaque())._withUnsafeGuaranteedRef(engine)
        }
        return Unmanaged<BackendArmings>.fromOpaque(seam.toOpaque())._withUnsafeGuaranteedRef(armings)
    }

    /// The current time on this timer's clock, as its seam measures it.
    func now() -> Int64 {
        let clock = self.clock
        return self.withSeam {
            $0.now(clock)
        } armings: {
            $0.now(clock)
        }
    }

    /// Arms `schedule` in place of the arming `previous` (0 for none); see
    /// ``TimerFiring/arm(_:clock:for:replacing:)``.
    @inline(__always)
    func seamArm(_ schedule: TimerSchedule, replacing previous: UInt64) throws(TimerError) -> UInt64 {
        let clock = self.clock
        let previous = previous == 0 ? nil : previous
        // Typed throws do not pass through the guaranteed reference's closure: a result does.
        // A reference taken out of it would retain the engine, which every timer shares.
        return try self.withSeam { seam in
            Result { () throws(TimerError) -> UInt64 in
                try seam.arm(schedule, clock: clock, for: self, replacing: previous)
            }
        } armings: { seam in
            Result { () throws(TimerError) -> UInt64 in
                try seam.arm(schedule, clock: clock, for: self, replacing: previous)
            }
        }.get()
    }

    func seamDisarm(_ arming: UInt64) {
        self.withSeam {
            $0.disarm(arming)
        } armings: {
            $0.disarm(arming)
        }
    }

    func seamRetire(_ arming: UInt64) {
        self.withSeam {
            $0.retire(arming)
        } armings: {
            $0.retire(arming)
        }
    }
}
