internal import CMetronome
@preconcurrency import Dispatch

/// The shell around ``TimerStateMachine``: decides under the lock, acts outside it.
///
/// Backends, handlers and C calls never run with the lock held (but for the engine's
/// in-place move, see `moveInPlace`): a handler may call back into its timer, and
/// `cancelAndWait` waits for handlers that take the same lock.
/// Nothing an arming hands out keeps the ``SafeDispatchTimer`` alive, so a dropped timer is
/// cancelled by its deinit rather than kept alive by its own schedule.
// Unchecked: its superclass cannot be checked, and its one `var` is reached only under its
// lock.
final class TimerCore: FiringReceiver, @unchecked Sendable {
    /// What fires this timer, in one word.
    private let seam: FiringSeam
    let clock: TimerClock
    /// Guards `storage`. A word in this object rather than a ``LockedBox``: an armed timer
    /// is then one allocation fewer, and a firing reaches its state in the object it
    /// already holds.
    private let lock = ParkingLock()
    // Reached only under `lock`.
    @exclusivity(unchecked) private var storage = Storage()

    init(queue: DispatchQueue?, seam: FiringSeam, clock: TimerClock) {
        self.seam = seam
        self.clock = clock
        super.init(queue: queue)
        // Counted from the first timer on, whatever its backend (see `deliveringInFork`).
        mtr_fork_watch()
    }

    /// The backend this core fires on, as the caller named it.
    var backend: SafeDispatchTimer.Backend {
        SafeDispatchTimer.Backend(self.seam.firing)
    }

    /// The schedule of a running or suspended timer, otherwise `nil`.
    var schedule: TimerSchedule? {
        self.withLockedStorage { storage in
            switch storage.machine.state {
            case .running(let schedule, _), .suspended(let schedule): schedule
            case .idle, .cancelled: nil
            }
        }
    }

    var state: SafeDispatchTimer.State {
        self.withLockedStorage { $0.machine.state.public }
    }

    func now() -> Int64 {
        self.seam.now(self.clock)
    }

    func schedule(deadline: DispatchTime, repeating: DispatchTimeInterval, leeway: DispatchTimeInterval)
        -> TimerSchedule?
    {
        guard case .nanoseconds(let leeway)? = DispatchConversions.interval(leeway),
            let period = DispatchConversions.interval(repeating)
        else { return nil }
        return Self.schedule(start: self.nanoseconds(of: deadline), period: period.nanoseconds, leeway: leeway)
    }

    /// A `DispatchTime` on this timer's clock. Inlined: on the monotonic clock it is one
    /// conversion, and a call would cost more.
    @inline(__always)
    private func nanoseconds(of deadline: DispatchTime) -> Int64 {
        // A closure, not the method `self.seam.now`: that would capture the backend, a
        // retain and a release on every reschedule, even on the monotonic clock, which
        // never reads it.
        DispatchConversions.deadline(deadline, on: self.clock) { self.seam.now($0) }
    }

    private static func schedule(start: Int64, period: Int64?, leeway: Int64) -> TimerSchedule? {
        // `.distantFuture` means "never": keep the window representable.
        TimerSchedule(
            deadlineNanoseconds: min(start, .max - min(leeway, period ?? leeway)),
            periodNanoseconds: period,
            leewayNanoseconds: leeway
        )
    }

    /// Schedules an idle or cancelled timer: `false` when its state refuses; throws what
    /// the backend refused.
    func schedule(_ schedule: TimerSchedule, handler: @escaping @Sendable (Tick) -> Void) throws(TimerError) -> Bool {
        let action = self.withLockedStorage { storage in
            let action = storage.machine.schedule(schedule)
            if case .arm = action { storage.handler = Handler(run: handler) }
            return action
        }
        switch action {
        case .arm(let arm):
            try self.carryOut(arm)
            return true
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
        Self.deadline(after: delay, from: self.now)
    }

    /// `delay` after the instant `now` reads, which is read only for a valid delay; `nil`
    /// for a negative delay or a deadline past `Int64` nanoseconds.
    static func deadline(after delay: Duration, from now: () -> Int64) -> Int64? {
        guard delay >= .zero, let delay = delay.representableNanoseconds else { return nil }
        let (deadline, overflow) = now().addingReportingOverflow(delay)
        return overflow ? nil : deadline
    }

    private static func schedule(at deadline: Int64, every period: Duration?, leeway: Int64) -> TimerSchedule? {
        var periodNanoseconds: Int64?
        if let period {
            // A period too long for `Int64` is refused, not saturated into a different one.
            guard let nanoseconds = period.representableNanoseconds else { return nil }
            periodNanoseconds = nanoseconds
        }
        return TimerSchedule(
            deadlineNanoseconds: deadline, periodNanoseconds: periodNanoseconds, leewayNanoseconds: leeway)
    }

    /// Moves a running or suspended timer to the schedule `makeSchedule` builds from the
    /// current leeway, under the lock; `nil` rejects the move. Inlined, so that
    /// `makeSchedule` is no closure call.
    @inline(__always)
    func reschedule(_ makeSchedule: (_ leewayNanoseconds: Int64) -> TimerSchedule?) -> Bool {
        let outcome = self.withLockedStorage { storage -> Rescheduled in
            let leeway: Int64
            switch storage.machine.state {
            case .running(let current, _), .suspended(let current): leeway = current.leewayNanoseconds
            case .idle, .cancelled: return .settled(accepted: false)
            }
            guard let schedule = makeSchedule(leeway) else { return .settled(accepted: false) }
            switch storage.machine.reschedule(schedule, canKeepArming: self.seam.keepsArmingsMovedLater) {
            case .keepArmed:
                storage.isPushable = true
                return .settled(accepted: true)
            case .keepSuspended: return .settled(accepted: true)
            case .reject: return .settled(accepted: false)
            case .arm(let arm): return self.moveInPlace(arm, &storage) ? .settled(accepted: true) : .arm(arm)
            }
        }
        switch outcome {
        case .settled(let accepted): return accepted
        case .arm(let arm): return self.accepted(arm)
        }
    }

    /// Moves the arming `arm` replaces to `arm`'s schedule, under the lock; `false` when the
    /// backend cannot, and the caller arms anew outside it.
    ///
    /// The one call into a backend under this lock: an engine moves its C timer in place,
    /// and its new id is recorded before any firing can look for it, with no transition
    /// between. It takes only the engine's lock, which no one holds while waiting for a
    /// handler.
    private func moveInPlace(_ arm: TimerStateMachine.Arm, _ storage: inout Storage) -> Bool {
        guard let previous = arm.disarming,
            let moved = (try? self.seam.move(previous, arm.schedule, clock: self.clock)) ?? nil
        else { return false }
        _ = storage.machine.armed(generation: arm.generation, arming: moved)
        return true
    }

    /// How a reschedule went under the lock. Small on purpose: a timeout pushed later on
    /// every request ends here, and returning the machine's whole action would copy an
    /// arming through memory each time.
    private enum Rescheduled {
        /// Nothing left to do: whether the timer took the new schedule (kept, stored for a
        /// resume, or moved in place by the backend).
        case settled(accepted: Bool)
        /// An arming to carry out outside the lock.
        case arm(TimerStateMachine.Arm)
    }

    func suspend() -> Bool {
        self.carryOut(self.withLockedStorage { $0.machine.suspend() })
    }

    func resume() -> Bool {
        let now = self.now()
        switch self.withLockedStorage({ $0.machine.resume(now: now) }) {
        case .arm(let arm): return self.accepted(arm)
        case .reject: return false
        }
    }

    func cancel() -> Bool {
        self.carryOut(self.withLockedStorage { $0.machine.cancel() })
    }

    func cancelAndWait() {
        _ = self.cancel()
        guard !CurrentHandler.isRunning(for: self) else { return }
        self.waitForHandlers { () -> (HandlerWaiter, DispatchSemaphore) in
            let semaphore = DispatchSemaphore(value: 0)
            return (.blocked(semaphore), semaphore)
        }?.wait()
    }

    func cancelAndAwaitHandlers() async {
        _ = self.cancel()
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            if self.waitForHandlers({ (.suspended(continuation), ()) }) == nil { continuation.resume() }
        }
    }

    /// Queues the waiter `makeWaiter` builds, and returns what comes with it, only while a
    /// handler runs; `nil` when none does, and nothing is made.
    private func waitForHandlers<Wait>(_ makeWaiter: () -> (HandlerWaiter, Wait)) -> Wait? {
        let fork = mtr_fork_generation()
        return self.withLockedStorage { storage in
            guard storage.isHandlerRunning, storage.isBusy(inFork: fork) else { return nil }
            let (waiter, wait) = makeWaiter()
            storage.waitingMade().callers.append(waiter)
            return wait
        }
    }

    /// Stops firing for good, whatever the state: later schedules are refused.
    func close() {
        _ = self.carryOut(self.withLockedStorage { $0.machine.close() })
    }

    /// Reserves an arming, records it, and only then starts it, so that its first firing
    /// always finds it current. The machine decides what an overtaken or refused arming
    /// means; whatever is not kept is disarmed here.
    ///
    /// - Throws: The backend's refusal, when it stopped the timer. An arming overtaken by a
    ///   later transition is not an error: that transition owns the timer.
    private func carryOut(_ arm: TimerStateMachine.Arm) throws(TimerError) {
        if let previous = arm.disarming { self.seam.disarm(previous) }
        let arming: UInt64
        do {
            arming = try self.seam.reserve(for: self)
        } catch {
            try self.refused(arm, error)
            return
        }
        guard self.withLockedStorage({ $0.machine.armed(generation: arm.generation, arming: arming) }) else {
            self.seam.disarm(arming)
            return
        }
        do {
            try self.seam.start(arming, arm.schedule, clock: self.clock)
        } catch {
            self.seam.disarm(arming)
            try self.refused(arm, error)
        }
    }

    /// Carries out an accepted arming: `false` when the backend refused it.
    private func accepted(_ arm: TimerStateMachine.Arm) -> Bool {
        (try? self.carryOut(arm)) != nil
    }

    private func refused(_ arm: TimerStateMachine.Arm, _ error: TimerError) throws(TimerError) {
        if self.withLockedStorage({ $0.machine.refused(generation: arm.generation) }) { throw error }
    }

    private func carryOut(_ stop: TimerStateMachine.StopAction) -> Bool {
        switch stop {
        case .disarm(let arming):
            if let arming { self.seam.disarm(arming) }
            return true
        case .acknowledge: return true
        case .reject: return false
        }
    }

    /// An arming dropped by a seam that stopped for good is one that never fires again: a
    /// running timer is then cancelled and lets go of its handler, as a cancel would. Any
    /// other release is of an arming this timer disarmed itself.
    override func released() {
        guard self.seam.hasStopped else { return }
        self.withLockedStorage { $0.machine.abandon() }
    }

    /// Runs `body` under the lock. A handler the timer no longer needs (see
    /// `takeHandlerIfStopped`) is released after unlocking: its captures' deinits may call
    /// back into this timer.
    ///
    /// Around `body` the owner's pushable deadline is taken back and published again (see
    /// ``PushableDeadline``), so `body` sees every push that succeeded and none slips in.
    private func withLockedStorage<Result>(_ body: (inout Storage) -> Result) -> Result {
        self.lock.lock(owner: self)
        // Tested here, not in the calls: most timers are never pushed, and every firing
        // takes this lock twice.
        if self.storage.isPushable { self.applyPushes() }
        let result = body(&self.storage)
        let stopped = self.storage.takeHandlerIfStopped()
        if self.storage.isPushable { self.publishPushable() }
        self.lock.unlock(owner: self)
        withExtendedLifetime(stopped) {}
        return result
    }

    /// Takes back the owner's pushable deadline, under the lock, and keeps the arming for
    /// the deadline the last push left, as a locked reschedule to it would have. Only for a
    /// pushable timer.
    private func applyPushes() {
        guard let owner = self.storage.owner,
            let pushed = owner._withUnsafeGuaranteedRef({ $0.pushable.withdraw() }),
            case .running(let current, _?) = self.storage.machine.state,
            pushed > current.deadlineNanoseconds,
            let schedule = TimerSchedule(deadlineNanoseconds: pushed, leewayNanoseconds: current.leewayNanoseconds)
        else { return }
        // Published only for a running one-shot, and only ever moved later: kept.
        _ = self.storage.machine.reschedule(schedule, canKeepArming: true)
    }

    /// Publishes the deadline of a running one-shot pushed later for the pushes that
    /// follow, under the lock, when the engine lets a one-shot moved later keep its arming.
    /// A timer that is anything else is no longer pushable: a new schedule is published
    /// once pushed under the lock. Only for a pushable timer.
    private func publishPushable() {
        guard let owner = self.storage.owner,
            case .running(let schedule, _?) = self.storage.machine.state,
            !schedule.isRepeating,
            schedule.leewayNanoseconds <= PushableDeadline.latest,
            self.seam.keepsArmingsMovedLater
        else {
            self.storage.isPushable = false
            return
        }
        owner._withUnsafeGuaranteedRef { $0.pushable.publish(schedule.deadlineNanoseconds) }
    }

    /// Records the timer this core serves; see `Storage.owner`.
    func attach(_ owner: SafeDispatchTimer) {
        self.withLockedStorage { $0.owner = .passUnretained(owner) }
    }

    /// Closes the timer for its owner's deinit, and forgets the owner before it is freed.
    func ownerGone() {
        _ = self.carryOut(
            self.withLockedStorage { storage in
                storage.owner = nil
                return storage.machine.close()
            })
    }

    /// A firing of `arming`, on the timer's queue (or the seam's thread without one).
    override func receive(_ tick: Tick, from arming: UInt64) {
        self.deliver(Firing(tick: tick, arming: arming), admitted: false)
    }

    /// A firing of `arming` on the engine's firing thread, for a timer with a queue: it goes
    /// to the queue unless one of this timer's is on its way or running, and then waits.
    override func enqueue(_ tick: Tick, from arming: UInt64) {
        let firing = Firing(tick: tick, arming: arming)
        let fork = mtr_fork_generation()
        guard self.withLockedStorage({ $0.admit(firing, inFork: fork) }) else { return }
        self.queue?.async { self.deliver(firing, admitted: true) }
    }

    /// Runs `firing` (admitting it first unless `admitted` on its way to the queue), then
    /// each firing that waited its turn meanwhile, where `firing` ran: right here for one
    /// the seam delivered (on its own thread, or on the queue it was given; a virtual
    /// timeline runs handlers on the thread that advances it), and in a block of its own on
    /// the queue for one this timer took there, so that a timer whose handler falls behind
    /// never holds a serial queue for good.
    ///
    /// Runs the handler if the firing is the current arming's, or arms the rest of a
    /// schedule that a reschedule pushed past the arming's deadline.
    private func deliver(_ firing: Firing, admitted: Bool) {
        let fork = mtr_fork_generation()
        let queue = admitted ? self.queue : nil
        var next: Firing? = firing
        var admitted = admitted
        while let firing = next {
            var rest: TimerStateMachine.Arm?
            var running: Handler?
            next = self.withLockedStorage { storage -> Firing? in
                guard admitted || storage.admit(firing, inFork: fork) else { return nil }
                switch storage.machine.fired(arming: firing.arming, scheduled: firing.tick.scheduled.nanoseconds) {
                case .runHandler:
                    // A one-shot that fired is idle: its handler is moved out, not copied, and
                    // goes once it returns. (A running timer always has one; a delivery that
                    // found none would still end below.)
                    running = storage.takeHandlerIfStopped() ?? storage.handler
                    guard running == nil else {
                        storage.isHandlerRunning = true
                        return nil
                    }
                case .arm(let arm):
                    if !self.moveInPlace(arm, &storage) { rest = arm }
                case .ignore:
                    break
                }
                return storage.nextFiring()
            }
            admitted = true
            if let rest { _ = self.accepted(rest) }
            if running != nil { next = self.run(&running, firing.tick, inFork: fork) }
            if let following = next, let queue {
                queue.async { self.deliver(following, admitted: true) }
                return
            }
        }
    }

    /// Runs the handler, then ends the firing's turn: returns the firing that waited.
    private func run(_ running: inout Handler?, _ tick: Tick, inFork fork: UInt32) -> Firing? {
        // Released while the handler still counts as running: its captures' deinits have
        // run when `cancelAndWait` returns, and one that calls `cancelAndWait` on this
        // timer returns at once instead of waiting for itself.
        CurrentHandler.run(for: self) {
            running?.run(tick)
            running = nil
        }
        // A handler that forked goes on in the child too, outside this timer's deliveries
        // there (see `deliveringInFork`): that copy leaves them be.
        guard mtr_fork_generation() == fork else { return nil }
        let (callers, next) = self.withLockedStorage { storage in
            storage.isHandlerRunning = false
            return (storage.takeCallers(), storage.nextFiring())
        }
        callers?.forEach { $0.release() }
        return next
    }
}
