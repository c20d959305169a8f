@preconcurrency import Dispatch

/// The shell around ``TimerStateMachine``: decides under the lock, acts outside it.
///
/// Backends, handlers and C calls never run with the lock held: a handler may call back
/// into its timer, and `cancelAndWait` waits for handlers that take the same lock.
/// Nothing an arming hands out keeps the ``SafeDispatchTimer`` alive, so a dropped timer is
/// cancelled by its deinit rather than kept alive by its own schedule.
final class TimerCore: Sendable {
    /// What fires the timer.
    enum Firing: Sendable {
        /// The engine's C timers carry this core as their context and are told apart by
        /// their ids: an arming allocates nothing, and a firing reaches the core through
        /// one pointer (the cost at a million timers is cache misses, one per object).
        case engine(TimerEngine)
        /// Any other backend, through a closure per arming.
        case backend(any TimerBackend)
    }

    /// The user's handler, wrapped so that passing it out of the lock's generic closure
    /// does not re-abstract (and allocate) it on every firing.
    private struct Handler {
        let run: @Sendable (Tick) -> Void
    }

    /// What fires the current generation.
    private enum Armed {
        /// An engine timer: its firings carry its id.
        case engine(id: UInt64, generation: UInt64)
        /// Another backend's handle, boxed: with an existential payload, every copy of an
        /// `Armed?` went through `Optional`'s generic value witnesses, on the engine's path
        /// too. Boxing it, and unpacking `Firing`, took a Swift reschedule from 2,170
        /// instructions to 1,280 (callgrind).
        case backend(BackendHandle)
    }

    private final class BackendHandle: Sendable {
        let timer: any ArmedTimer

        init(_ timer: any ArmedTimer) {
            self.timer = timer
        }
    }

    private struct Storage {
        var machine = TimerStateMachine()
        var handler: Handler?
        /// The firings of the current generation, once armed.
        var armed: Armed?
        var handlersRunning = 0
        /// Callers of `cancelAndWait` waiting for handlers: a firing broadcasts only then.
        var waiters = 0
        /// Tasks suspended in `cancelAndAwaitHandlers`, resumed when no handler runs.
        var suspendedWaiters: [CheckedContinuation<Void, Never>] = []
    }

    private let storage = LockedBox(Storage())
    private let queue: DispatchQueue?
    // `Firing`, unpacked: switching over an enum with an existential payload copies the
    // payload through value witnesses, on every transition.
    private let engine: TimerEngine?
    private let backend: (any TimerBackend)?
    let clock: TimerClock

    init(queue: DispatchQueue?, firing: Firing, clock: TimerClock) {
        self.queue = queue
        switch firing {
        case .engine(let engine): (self.engine, self.backend) = (engine, nil)
        case .backend(let backend): (self.engine, self.backend) = (nil, backend)
        }
        self.clock = clock
    }

    /// The backend this core fires on, as the caller named it.
    var firing: SafeDispatchTimer.Backend {
        if let engine = self.engine { return .engine(engine) }
        guard let backend = self.backend, !(backend is DispatchBackend) else { return .dispatch }
        return .custom(backend)
    }

    /// The schedule of a running or suspended timer, otherwise `nil`.
    var schedule: TimerSchedule? {
        self.storage.withLockedValue { storage in
            switch storage.machine.state {
            case .running(let schedule, _), .suspended(let schedule, _): schedule
            case .idle, .cancelled: nil
            }
        }
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
        self.now(self.clock)
    }

    private func now(_ clock: TimerClock) -> Int64 {
        guard let backend = self.backend else { return clock.now().nanoseconds }
        return backend.now(clock)
    }

    func schedule(deadline: DispatchTime, repeating: DispatchTimeInterval, leeway: DispatchTimeInterval)
        -> TimerSchedule?
    {
        guard case .nanoseconds(let leeway)? = DispatchConversions.interval(leeway),
            let period = DispatchConversions.interval(repeating)
        else { return nil }
        return Self.schedule(start: self.nanoseconds(of: deadline), period: period.nanoseconds, leeway: leeway)
    }

    /// A `DispatchTime` on this timer's clock.
    private func nanoseconds(of deadline: DispatchTime) -> Int64 {
        DispatchConversions.deadline(deadline, on: self.clock, now: self.now)
    }

    private static func schedule(start: Int64, period: Int64?, leeway: Int64) -> TimerSchedule? {
        // `.distantFuture` means "never": keep the window representable.
        TimerSchedule(
            deadlineNanoseconds: min(start, .max - min(leeway, period ?? leeway)),
            periodNanoseconds: period,
            leewayNanoseconds: leeway
        )
    }

    func schedule(_ schedule: TimerSchedule, handler: @escaping @Sendable (Tick) -> Void) -> Bool {
        let (action, previous) = self.storage.withLockedValue { storage in
            let action = storage.machine.schedule(schedule)
            guard case .arm = action else { return (action, nil as Armed?) }
            storage.handler = Handler(run: handler)
            return (action, storage.armed.take())
        }
        self.disarm(previous)
        switch action {
        case .arm(let schedule, let generation): return self.arm(schedule, generation: generation)
        case .reject: return false
        }
    }

    func reschedule(deadline: DispatchTime, repeating: DispatchTimeInterval) -> Bool {
        guard let period = DispatchConversions.interval(repeating) else { return false }
        // Read outside the lock: a backend's clock may take a lock of its own.
        let start = self.nanoseconds(of: deadline)
        return self.reschedule { leeway in Self.schedule(start: start, period: period.nanoseconds, leeway: leeway) }
    }

    func schedule(after delay: Duration, every period: Duration?, leeway: Duration) -> TimerSchedule? {
        guard let deadline = self.deadline(after: delay), let leeway = leeway.representableNanoseconds else {
            return nil
        }
        return Self.schedule(at: deadline, every: period, leeway: leeway)
    }

    func reschedule(after delay: Duration, every period: Duration?) -> Bool {
        guard let deadline = self.deadline(after: delay) else { return false }
        return self.reschedule(at: deadline, every: period)
    }

    func reschedule(at deadline: Int64, every period: Duration?) -> Bool {
        self.reschedule { leeway in Self.schedule(at: deadline, every: period, leeway: leeway) }
    }

    /// `delay` from now on this timer's clock; `nil` for a negative delay or a deadline
    /// past `Int64` nanoseconds.
    private func deadline(after delay: Duration) -> Int64? {
        guard delay >= .zero, let delay = delay.representableNanoseconds else { return nil }
        let (deadline, overflow) = self.now().addingReportingOverflow(delay)
        return overflow ? nil : deadline
    }

    private static func schedule(at deadline: Int64, every period: Duration?, leeway: Int64) -> TimerSchedule? {
        var periodNanoseconds: Int64?
        if let period {
            // A period too long for `Int64` is refused, not saturated into a different one.
            guard let nanoseconds = period.representableNanoseconds else { return nil }
            periodNanoseconds = nanoseconds
        }
        return TimerSchedule(deadlineNanoseconds: deadline, periodNanoseconds: periodNanoseconds, leewayNanoseconds: leeway)
    }

    /// Moves a running or suspended timer to the schedule `makeSchedule` builds from the
    /// current leeway, under the lock; `nil` rejects the move.
    func reschedule(_ makeSchedule: (_ leewayNanoseconds: Int64) -> TimerSchedule?) -> Bool {
        let (action, previous) = self.storage.withLockedValue { storage in
            let leeway: Int64
            switch storage.machine.state {
            case .running(let current, _), .suspended(let current, _): leeway = current.leewayNanoseconds
            case .idle, .cancelled: return (TimerStateMachine.RescheduleAction.reject, nil as Armed?)
            }
            guard let schedule = makeSchedule(leeway) else { return (.reject, nil) }
            let action = storage.machine.reschedule(schedule)
            guard case .arm = action else { return (action, nil) }
            return (action, storage.armed.take())
        }
        self.disarm(previous)
        switch action {
        case .arm(let schedule, let generation): return self.arm(schedule, generation: generation)
        case .keepSuspended: return true
        case .reject: return false
        }
    }

    func suspend() -> Bool {
        let (action, previous) = self.storage.withLockedValue { storage in
            let action = storage.machine.suspend()
            return (action, action == .disarm ? storage.armed.take() : nil)
        }
        self.disarm(previous)
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
            return (action, storage.armed.take())
        }
        self.disarm(previous)
        switch action {
        case .disarm, .acknowledge: return true
        case .reject: return false
        }
    }

    func cancelAndWait() {
        _ = self.cancel()
        guard !CurrentHandler.isRunning(for: self) else { return }
        self.storage.withLockedValue { $0.waiters += 1 }
        self.storage.wait { $0.handlersRunning == 0 }
        self.storage.withLockedValue { $0.waiters -= 1 }
    }

    func cancelAndAwaitHandlers() async {
        _ = self.cancel()
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let idle = self.storage.withLockedValue { storage in
                guard storage.handlersRunning > 0 else { return true }
                storage.suspendedWaiters.append(continuation)
                return false
            }
            if idle { continuation.resume() }
        }
    }

    /// The owner is gone: stop firing, whatever the state.
    func close() {
        _ = self.cancel()
    }

    /// Arms the backend for a schedule the machine accepted. If another transition
    /// overtook this one meanwhile, the new firings are stale and are disarmed at once.
    private func arm(_ schedule: TimerSchedule, generation: UInt64) -> Bool {
        if let engine = self.engine { return self.arm(schedule, generation: generation, on: engine) }
        let armed = self.backend?.arm(schedule, clock: self.clock, queue: self.queue) { [weak self] tick in
            self?.fire(tick) { _ in generation }
        }
        return self.install(armed.map { .backend(BackendHandle($0)) }, generation: generation)
    }

    /// Stores `armed` as the current generation's firings; `nil` means the backend
    /// refused (for the engine: it was shut down), which stops the timer.
    private func install(_ armed: Armed?, generation: UInt64) -> Bool {
        let (accepted, stale) = self.storage.withLockedValue { storage -> (Bool, Armed?) in
            guard let armed else {
                if storage.machine.generation == generation { _ = storage.machine.cancel() }
                return (false, nil)
            }
            guard storage.machine.generation == generation else { return (true, armed) }
            let previous = storage.armed.take()
            storage.armed = armed
            return (true, previous)
        }
        self.disarm(stale)
        return accepted
    }

    /// The engine path: the C timer is created, recorded as this generation's, and only
    /// then armed, so that its first firing always finds its id.
    private func arm(_ schedule: TimerSchedule, generation: UInt64, on engine: TimerEngine) -> Bool {
        let id = engine.makeTimer(firing: self)
        guard self.install(id.map { .engine(id: $0, generation: generation) }, generation: generation), let id else {
            return false
        }
        guard !engine.start(id, schedule, clock: self.clock) else { return true }
        // Refused: the engine stopped between the two calls, and the timer stops too,
        // unless another transition already replaced this arming.
        let refused = self.storage.withLockedValue { storage -> Bool in
            guard case .engine(id, _)? = storage.armed else { return false }
            storage.armed = nil
            _ = storage.machine.cancel()
            return true
        }
        engine.destroy(id)
        return !refused
    }

    /// Stops the firings of an arming taken out of the storage.
    private func disarm(_ armed: Armed?) {
        switch armed {
        case .engine(let id, _)?: self.engine?.destroy(id)
        case .backend(let handle)?: handle.timer.disarm()
        case nil: break
        }
    }

    /// A firing of one of this core's engine timers, on the firing thread.
    func fire(engineTimer id: UInt64, tick: Tick) {
        guard let queue = self.queue else { return self.fire(tick, engineTimer: id) }
        queue.async { self.fire(tick, engineTimer: id) }
    }

    private func fire(_ tick: Tick, engineTimer id: UInt64) {
        self.fire(tick) { storage in
            guard case .engine(id, let generation)? = storage.armed else { return nil }
            return generation
        }
    }

    /// Runs the handler if the firing belongs to the current arming: `generation` names
    /// it, under the lock, or says it is stale.
    private func fire(_ tick: Tick, generation: (borrowing Storage) -> UInt64?) {
        let handler = self.storage.withLockedValue { storage -> Handler? in
            guard let current = generation(storage) else { return nil }
            switch storage.machine.fired(generation: current, scheduled: tick.scheduled.nanoseconds) {
            case .runHandler:
                storage.handlersRunning += 1
                return storage.handler
            case .ignore:
                return nil
            }
        }
        guard let handler else { return }
        CurrentHandler.run(for: self) { handler.run(tick) }
        let (wake, suspended) = self.storage.withLockedValue { storage in
            storage.handlersRunning -= 1
            guard storage.handlersRunning == 0 else { return (false, nil as [CheckedContinuation<Void, Never>]?) }
            // Taken only when there are waiters: the common firing touches no array.
            let suspended = storage.suspendedWaiters.isEmpty ? nil : storage.suspendedWaiters
            if suspended != nil { storage.suspendedWaiters = [] }
            return (storage.waiters > 0, suspended)
        }
        if wake { self.storage.broadcast() }
        suspended?.forEach { $0.resume() }
    }
}
