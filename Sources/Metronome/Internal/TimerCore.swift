@preconcurrency import Dispatch

/// The shell around ``TimerStateMachine``: decides under the lock, acts outside it.
///
/// Backends, handlers and C calls never run with the lock held: a handler may call back
/// into its timer, and `cancelAndWait` waits for handlers that take the same lock.
/// Firings capture the core weakly, so a dropped ``SafeDispatchTimer`` is cancelled by its
/// deinit rather than kept alive by its own schedule.
final class TimerCore: Sendable {
    /// The user's handler, wrapped so that passing it out of the lock's generic closure
    /// does not re-abstract (and allocate) it on every firing.
    private struct Handler {
        let run: @Sendable (Tick) -> Void
    }

    private struct Storage {
        var machine = TimerStateMachine()
        var handler: Handler?
        /// The firings of the current generation, once armed.
        var armed: (any ArmedTimer)?
        var handlersRunning = 0

        mutating func takeArmed() -> (any ArmedTimer)? {
            defer { self.armed = nil }
            return self.armed
        }
    }

    private let storage = LockedBox(Storage())
    private let queue: DispatchQueue?
    private let backend: any TimerBackend
    private let clock: TimerClock

    init(queue: DispatchQueue?, backend: any TimerBackend, clock: TimerClock) {
        self.queue = queue
        self.backend = backend
        self.clock = clock
    }

    var state: SafeDispatchTimer.State {
        self.storage.withLockedValue { storage in
            switch storage.machine.state {
            case .idle: .idle
            case .running: .running
            case .suspended: .suspended
            case .cancelled: .cancelled
            }
        }
    }

    func now() -> Int64 {
        self.backend.now(self.clock)
    }

    func schedule(deadline: DispatchTime, repeating: DispatchTimeInterval, leeway: DispatchTimeInterval)
        -> TimerSchedule?
    {
        guard case .nanoseconds(let leeway)? = DispatchConversions.interval(leeway),
            let period = DispatchConversions.interval(repeating)
        else { return nil }
        return self.schedule(deadline: deadline, period: period, leeway: leeway)
    }

    private func schedule(deadline: DispatchTime, period: DispatchConversions.Interval, leeway: Int64)
        -> TimerSchedule?
    {
        let periodNanoseconds: Int64? =
            switch period {
            case .nanoseconds(let nanoseconds): nanoseconds
            case .never: nil
            }
        // `.distantFuture` means "never": keep the window representable.
        let start = min(
            DispatchConversions.deadline(deadline, on: self.clock, backend: self.backend),
            .max - min(leeway, periodNanoseconds ?? leeway)
        )
        return TimerSchedule(deadlineNanoseconds: start, periodNanoseconds: periodNanoseconds, leewayNanoseconds: leeway)
    }

    func schedule(_ schedule: TimerSchedule, handler: @escaping @Sendable (Tick) -> Void) -> Bool {
        let (action, previous) = self.storage.withLockedValue { storage in
            let action = storage.machine.schedule(schedule)
            guard case .arm = action else { return (action, nil as (any ArmedTimer)?) }
            storage.handler = Handler(run: handler)
            return (action, storage.takeArmed())
        }
        previous?.disarm()
        switch action {
        case .arm(let schedule, let generation): return self.arm(schedule, generation: generation)
        case .reject: return false
        }
    }

    func reschedule(deadline: DispatchTime, repeating: DispatchTimeInterval) -> Bool {
        guard let period = DispatchConversions.interval(repeating) else { return false }
        let (action, previous) = self.storage.withLockedValue { storage in
            let leeway: Int64
            switch storage.machine.state {
            case .running(let current, _), .suspended(let current, _): leeway = current.leewayNanoseconds
            case .idle, .cancelled: return (TimerStateMachine.RescheduleAction.reject, nil as (any ArmedTimer)?)
            }
            guard let schedule = self.schedule(deadline: deadline, period: period, leeway: leeway) else {
                return (.reject, nil)
            }
            let action = storage.machine.reschedule(schedule)
            guard case .arm = action else { return (action, nil) }
            return (action, storage.takeArmed())
        }
        previous?.disarm()
        switch action {
        case .arm(let schedule, let generation): return self.arm(schedule, generation: generation)
        case .keepSuspended: return true
        case .reject: return false
        }
    }

    func suspend() -> Bool {
        let (action, previous) = self.storage.withLockedValue { storage in
            let action = storage.machine.suspend()
            return (action, action == .disarm ? storage.takeArmed() : nil)
        }
        previous?.disarm()
        switch action {
        case .disarm: return true
        case .reject: return false
        }
    }

    func resume() -> Bool {
        let now = self.now()
        let action = self.storage.withLockedValue { $0.machine.resume(now: now) }
        switch action {
        case .arm(let schedule, let generation): return self.arm(schedule, generation: generation)
        case .reject: return false
        }
    }

    func cancel() -> Bool {
        let (action, previous) = self.storage.withLockedValue { storage in
            let action = storage.machine.cancel()
            return (action, storage.takeArmed())
        }
        previous?.disarm()
        switch action {
        case .disarm, .acknowledge: return true
        case .reject: return false
        }
    }

    func cancelAndWait() {
        _ = self.cancel()
        guard !CurrentHandler.isRunning(for: self) else { return }
        self.storage.wait { $0.handlersRunning == 0 }
    }

    /// The owner is gone: stop firing, whatever the state.
    func close() {
        _ = self.cancel()
    }

    /// Arms the backend for a schedule the machine accepted. If another transition
    /// overtook this one meanwhile, the new firings are stale and are disarmed at once.
    private func arm(_ schedule: TimerSchedule, generation: UInt64) -> Bool {
        let armed = self.backend.arm(schedule, clock: self.clock, queue: self.queue) { [weak self] tick in
            self?.fire(generation: generation, tick: tick)
        }
        let (accepted, stale) = self.storage.withLockedValue { storage -> (Bool, (any ArmedTimer)?) in
            guard let armed else {
                // The backend refused (an engine that was shut down): the timer is stopped.
                if storage.machine.generation == generation { _ = storage.machine.cancel() }
                return (false, nil)
            }
            guard storage.machine.generation == generation else { return (true, armed) }
            let previous = storage.takeArmed()
            storage.armed = armed
            return (true, previous)
        }
        stale?.disarm()
        return accepted
    }

    private func fire(generation: UInt64, tick: Tick) {
        let handler = self.storage.withLockedValue { storage -> Handler? in
            switch storage.machine.fired(generation: generation, scheduled: tick.scheduled.nanoseconds) {
            case .runHandler:
                storage.handlersRunning += 1
                return storage.handler
            case .ignore:
                return nil
            }
        }
        guard let handler else { return }
        CurrentHandler.run(for: self) { handler.run(tick) }
        let idle = self.storage.withLockedValue { storage in
            storage.handlersRunning -= 1
            return storage.handlersRunning == 0
        }
        if idle { self.storage.broadcast() }
    }
}
