@preconcurrency import Dispatch

/// The shell around ``TimerStateMachine``: decides under the lock, and arms, moves or
/// disarms before unlocking, with one seam call that takes only the seam's own locks; the
/// handler, a retirement and anything that may call back into the timer run unlocked.
///
/// A handler may call back into its timer, and `cancelAndWait` waits for handlers that take
/// the same lock. Nothing an arming hands out keeps the ``SafeDispatchTimer`` alive, so a
/// dropped timer is cancelled by its deinit rather than kept alive by its own schedule. The
/// engine holds the core as its C timer's context: a firing finds the lock and the state in
/// this one object. No `ManagedBuffer` can be `Sendable`, so its holders say with
/// `nonisolated(unsafe)` that it is safe from any thread: its mutable state is behind its lock.
final class TimerCore: LockedBuffer<TimerCoreContents> {
    static func make(delivery: HandlerDelivery?, firing: any TimerFiring, clock: TimerClock) -> TimerCore {
        // Counted from the first timer on, whatever its backend (see `deliveringInFork`).
        ForkGeneration.watch()
        return Self.make(TimerCoreContents(delivery: delivery, clock: clock, state: TimerState(firing: firing)))
    }

    // Set once at creation: read without the lock, where they lie.
    var firing: any TimerFiring { unsafeAddress { self.contents(\.state.firing) } }
    var clock: TimerClock { unsafeAddress { self.contents(\.clock) } }
    var delivery: HandlerDelivery? { unsafeAddress { self.contents(\.delivery) } }

    @inline(__always) private func contents<Part>(_ part: KeyPath<TimerCoreContents, Part>) -> UnsafePointer<Part> {
        UnsafePointer(self.withUnsafeMutablePointerToHeader { $0.pointer(to: part)! })
    }

    var schedule: TimerSchedule? {
        self.withLockedStorage { $0.machine.state.schedule }
    }

    var state: SafeDispatchTimer.State {
        self.withLockedStorage { $0.machine.state.public }
    }

    func now() -> Int64 {
        self.firing.now(self.clock)
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
        // A closure, not the method `self.firing.now`: that would capture the backend, a
        // retain and a release on every reschedule, even on the monotonic clock, which
        // never reads it.
        DispatchConversions.deadline(deadline, on: self.clock) { self.firing.now($0) }
    }

    private static func schedule(start: Int64, period: Int64?, leeway: Int64) -> TimerSchedule? {
        // A window past the end of time (`.distantFuture` means "never") is cut short, never
        // moved earlier: late, never early.
        TimerSchedule(
            deadlineNanoseconds: start, periodNanoseconds: period,
            leewayNanoseconds: min(leeway, .max - max(start, 0)))
    }

    /// Schedules an idle or cancelled timer: `false` when its state refuses; throws what
    /// the backend refused.
    func schedule(_ schedule: TimerSchedule, handler: @escaping @Sendable (Tick) -> Void) throws(TimerError) -> Bool {
        let outcome = self.withLockedStorage { storage -> Result<Bool, TimerError> in
            guard case .arm(let schedule) = storage.machine.schedule(schedule) else { return .success(false) }
            storage.handler = TimerState.Handler(run: handler)
            return self.arm(schedule, &storage)
        }
        return try outcome.get()
    }

    func reschedule(deadline: DispatchTime, repeating: DispatchTimeInterval) -> Bool {
        guard let period = DispatchConversions.interval(repeating) else { return false }
        // Read outside the lock: a backend's clock may take a lock of its own.
        let start = self.nanoseconds(of: deadline)
        return self.reschedule { leeway in Self.schedule(start: start, period: period.nanoseconds, leeway: leeway) }
    }

    /// The schedule of a `Duration`-family call, by the rules every type follows: a delay
    /// or deadline that has passed fires at once, a negative leeway is none, a span past
    /// `Int64` nanoseconds saturates (a deadline there never comes), a leeway longer than
    /// the period is cut to it, and only a period that is not positive is refused.
    func schedule(after delay: Duration, every period: Duration?, leeway: Duration) throws(TimerError) -> TimerSchedule
    {
        try Self.schedule(at: self.deadline(after: delay), every: period, leeway: leeway)
    }

    func reschedule(after delay: Duration, every period: Duration?) -> Bool {
        self.reschedule(at: self.deadline(after: delay), every: period)
    }

    func reschedule(at deadline: Int64, every period: Duration?) -> Bool {
        self.reschedule { leeway in try? Self.schedule(at: deadline, every: period, leeway: .nanoseconds(leeway)) }
    }

    /// `delay` from now on this timer's clock; a negative delay is now.
    private func deadline(after delay: Duration) -> Int64 {
        self.now().addingSaturating(max(delay, .zero).saturatingNanoseconds)
    }

    static func schedule(at deadline: Int64, every period: Duration?, leeway: Duration) throws(TimerError)
        -> TimerSchedule
    {
        // A period under a nanosecond is none in the nanoseconds a schedule holds.
        func refusal() -> TimerError {
            .invalid("period", "must be at least a nanosecond, not \(period ?? .zero)", in: "schedule")
        }
        if let period, period < .nanoseconds(1) { throw refusal() }
        // The deadline, leeway and window are made representable, so the schedule is valid.
        let schedule = Self.schedule(
            start: max(deadline, 0), period: period?.saturatingNanoseconds,
            leeway: max(leeway, .zero).saturatingNanoseconds)
        guard let schedule else { throw refusal() }
        return schedule
    }

    /// Moves a running or suspended timer to the schedule `makeSchedule` builds from the
    /// current leeway; `nil` rejects the move. A running timer's arming is moved in place:
    /// on the engine a later deadline on the same clock is an O(1) move in the core.
    private func reschedule(_ makeSchedule: (_ leewayNanoseconds: Int64) -> TimerSchedule?) -> Bool {
        self.withLockedStorage { storage in
            guard let current = storage.machine.state.schedule,
                let schedule = makeSchedule(current.leewayNanoseconds)
            else { return false }
            switch storage.machine.reschedule(schedule) {
            case .arm(let schedule): return (try? self.arm(schedule, &storage).get()) != nil
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
            return (try? self.arm(schedule, &storage).get()) != nil
        }
    }

    func cancel() -> Bool {
        self.withLockedStorage { self.carryOut($0.machine.cancel(), &$0) }
    }

    func cancelAndWait() {
        _ = self.cancel()
        guard !CurrentHandler.isRunning(for: self) else { return }
        self.waitForHandlers { () -> (TimerState.HandlerWaiter, DispatchSemaphore) in
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

    /// Queues the waiter `makeWaiter` builds, and returns what comes with it, only while a
    /// handler runs (or, with `includingDeliveries`, a delivery is under way); `nil` when
    /// none is, and nothing is made.
    private func waitForHandlers<Wait>(
        includingDeliveries: Bool = false, _ makeWaiter: () -> (TimerState.HandlerWaiter, Wait)
    ) -> Wait? {
        let fork = ForkGeneration.current
        return self.withLockedStorage { storage in
            guard storage.isHandlerRunning || includingDeliveries, storage.isBusy(inFork: fork) else { return nil }
            let (waiter, wait) = makeWaiter()
            storage.waitingMade().callers.append(waiter)
            return wait
        }
    }

    /// Stops firing for good, whatever the state: later schedules are refused.
    func close() {
        self.withLockedStorage { _ = self.carryOut($0.machine.close(), &$0) }
    }

    /// Arms `schedule` in place of the current arming, under the lock, and records the new
    /// arming before any of its firings can look for it. A refusal stops the timer.
    private func arm(_ schedule: TimerSchedule, _ storage: inout TimerState) -> Result<Bool, TimerError> {
        do {
            storage.arming = try storage.firing.arm(schedule, clock: self.clock, for: self, replacing: storage.arming)
            return .success(true)
        } catch {
            storage.machine.refused()
            return .failure(error)
        }
    }

    private func carryOut(_ stop: TimerStateMachine.StopAction, _ storage: inout TimerState) -> Bool {
        switch stop {
        case .disarm:
            if let arming = storage.arming { storage.firing.disarm(arming) }
            return true
        case .acknowledge: return true
        case .reject: return false
        }
    }

    /// The seam let go of this timer, unlocked: if it stopped for good, the timer is cancelled
    /// and lets go of its handler, as a cancel would. Otherwise the owner retired it.
    func released() {
        guard self.firing.hasStopped else { return }
        self.withLockedStorage { storage in
            storage.machine.abandon()
            storage.arming = nil
        }
    }

    /// Runs `body` on the state (reached alone: the rest is read unlocked) under the lock. A
    /// handler the timer no longer needs (see `takeHandlerIfStopped`) is released after
    /// unlocking: its captures' deinits may call back into this timer.
    private func withLockedStorage<Result>(_ body: (inout TimerState) -> Result) -> Result {
        let (result, stopped) = self.withLock { contents in
            let state = contents.pointer(to: \.state)!
            return (body(&state.pointee), state.pointee.takeHandlerIfStopped())
        }
        withExtendedLifetime(stopped) {}
        return result
    }

    /// Closes the timer for its owner's deinit and retires its arming, unlocked: the
    /// engine's retirement may release this object.
    func ownerGone() {
        let arming = self.withLockedStorage { storage in
            _ = self.carryOut(storage.machine.close(), &storage)
            return storage.arming.take()
        }
        if let arming { self.firing.retire(arming) }
    }

    /// A firing of `arming` where the seam fired it: run here when that is where the
    /// handler runs (the firing thread, or the queue a backend fired on), handed to the
    /// delivery otherwise.
    func receive(_ tick: Tick, from arming: UInt64, firedOnQueue: Bool) {
        // Read once per delivery: a handler that forks is told apart by a second read after it.
        let fork = ForkGeneration.current
        switch self.delivery {
        case nil: self.deliver(TimerState.Firing(tick: tick, arming: arming), admitted: false, inFork: fork)
        case .queue where firedOnQueue:
            self.deliver(TimerState.Firing(tick: tick, arming: arming), admitted: false, inFork: fork)
        case .queue, .executor: self.enqueue(tick, from: arming, inFork: fork)
        }
    }

    /// A firing of `arming` for a timer with a delivery: it goes there unless one of this
    /// timer's is on its way or running, and then waits.
    private func enqueue(_ tick: Tick, from arming: UInt64, inFork fork: UInt32) {
        let firing = TimerState.Firing(tick: tick, arming: arming)
        guard self.withLockedStorage({ $0.admit(firing, inFork: fork) }) else { return }
        nonisolated(unsafe) let core = self
        self.delivery?.async { core.deliver(firing, admitted: true, inFork: fork) }
    }

    /// Runs `firing` (admitting it first unless `admitted` on its way to the queue), then
    /// each firing that waited its turn meanwhile, where `firing` ran: right here for one
    /// the seam delivered (on its own thread, or on the queue it was given; a virtual
    /// timeline runs handlers on the thread that advances it), and in a block of its own on
    /// the queue for one this timer took there, so that a timer whose handler falls behind
    /// never holds a serial queue for good.
    ///
    /// Runs the handler if the firing is the current arming's.
    private func deliver(_ firing: TimerState.Firing, admitted: Bool, inFork fork: UInt32) {
        let delivery = admitted ? self.delivery : nil
        var next: TimerState.Firing? = firing
        var admitted = admitted
        while let firing = next {
            var running: TimerState.Handler?
            var callers: [TimerState.HandlerWaiter]?
            next = self.withLockedStorage { storage -> TimerState.Firing? in
                guard admitted || storage.admit(firing, inFork: fork) else { return nil }
                if storage.arming == firing.arming,
                    storage.machine.fired(scheduled: firing.tick.scheduled.nanoseconds) == .runHandler
                {
                    // A one-shot that fired is idle: its handler is moved out, not copied, and
                    // goes once it returns.
                    running = storage.takeHandlerIfStopped() ?? storage.handler
                    guard running == nil else {
                        storage.isHandlerRunning = true
                        return nil
                    }
                }
                // A delivery that ends without a handler frees who waited for it.
                let next = storage.nextFiring()
                if next == nil { callers = storage.takeCallers() }
                return next
            }
            callers?.forEach { $0.release() }
            admitted = true
            if running != nil { next = self.run(&running, firing.tick, inFork: fork) }
            if let following = next, let delivery {
                nonisolated(unsafe) let core = self
                delivery.async { core.deliver(following, admitted: true, inFork: fork) }
                return
            }
        }
    }

    /// Runs the handler, then ends the firing's turn: returns the firing that waited.
    private func run(_ running: inout TimerState.Handler?, _ tick: Tick, inFork fork: UInt32) -> TimerState.Firing? {
        // Released while the handler still counts as running: its captures' deinits have
        // run when `cancelAndWait` returns, and one that calls `cancelAndWait` on this
        // timer returns at once instead of waiting for itself.
        CurrentHandler.run(for: self) {
            running?.run(tick)
            running = nil
        }
        // A handler that forked goes on in the child too, outside this timer's deliveries
        // there (see `deliveringInFork`): that copy leaves them be.
        guard ForkGeneration.current == fork else { return nil }
        let (callers, next) = self.withLockedStorage { storage in
            storage.isHandlerRunning = false
            return (storage.takeCallers(), storage.nextFiring())
        }
        callers?.forEach { $0.release() }
        return next
    }
}

/// What a ``TimerCore`` holds: the delivery and clock it was made with, read without the
/// lock, and its state, reached only under it.
struct TimerCoreContents {
    let delivery: HandlerDelivery?
    let clock: TimerClock
    var state: TimerState
}

/// The machine, the handler, and the delivery that keeps one timer's handlers from overlapping.
struct TimerState {
    // Ordered to leave little padding and to keep what a reschedule reaches near the mutex.

    /// The user's handler, wrapped so that passing it out of the lock's generic closure
    /// does not re-abstract (and allocate) it on every firing.
    struct Handler {
        let run: @Sendable (Tick) -> Void
    }

    /// A caller waiting for the running handlers: a thread blocked on a semaphore, or a
    /// suspended task. Made only when a handler runs, so an idle timer carries none.
    enum HandlerWaiter {
        case blocked(DispatchSemaphore)
        case suspended(CheckedContinuation<Void, Never>)

        func release() {
            switch self {
            case .blocked(let semaphore): semaphore.signal()
            case .suspended(let continuation): continuation.resume()
            }
        }
    }

    /// A firing on its way to the handler: what it stands for, and from which arming.
    struct Firing {
        var tick: Tick
        let arming: UInt64

        /// This firing, standing also for `earlier`, which waited and never ran: of the
        /// same arming it counts as a skipped period; of another, it is stale.
        func merged(after earlier: Firing) -> Firing {
            guard earlier.arming == self.arming else { return self }
            var merged = self
            merged.tick = self.tick.merged(after: earlier.tick)
            return merged
        }
    }

    /// What waits on a busy timer: callers for its handler to end, and a firing for its
    /// turn. Made only then, so an idle timer carries none. Reached only under the lock.
    final class Waiting {
        /// Callers in `cancelAndWait` or `cancelAndAwaitHandlers`; released when the
        /// handler ends.
        var callers: [HandlerWaiter] = []
        var firing: Firing?
    }

    var handler: Handler?
    /// What fires the timer; set once. Called through the locked state, borrowed, not retained.
    let firing: any TimerFiring
    var waiting: Waiting?
    /// The id of the timer's latest arming, armed or disarmed: the one whose firings
    /// run the handler while the timer runs, and the one the next arming replaces.
    var arming: UInt64?
    /// A firing is being delivered: on its way to the queue, or running the handler.
    /// Another that comes meanwhile waits its turn, merged with any other waiting, so
    /// that one timer's handlers never overlap (a dispatch source's never do, even on a
    /// concurrent queue) and a slow handler never has stale firings queued behind it.
    var isDelivering = false
    var isHandlerRunning = false
    /// The process's fork count (``ForkGeneration``) when the delivery began: in a
    /// child forked meanwhile, no thread delivers it, so it is over there.
    var deliveringInFork: UInt32 = 0
    var machine = TimerStateMachine()

    /// Whether a delivery is under way in the process of fork count `fork`.
    func isBusy(inFork fork: UInt32) -> Bool {
        self.isDelivering && self.deliveringInFork == fork
    }

    /// Takes `firing` for delivery, or has it wait its turn behind the one under way.
    /// A firing of an arming no longer current, or of a timer no longer running, is
    /// dropped here: it would run nothing, and a cancelled timer hands nothing more to its
    /// queue or executor.
    mutating func admit(_ firing: Firing, inFork fork: UInt32) -> Bool {
        guard firing.arming == self.arming, case .running = self.machine.state else { return false }
        guard self.isBusy(inFork: fork) else {
            self.isDelivering = true
            self.isHandlerRunning = false
            self.deliveringInFork = fork
            return true
        }
        let waiting = self.waitingMade()
        waiting.firing = waiting.firing.map { firing.merged(after: $0) } ?? firing
        return false
    }

    /// What waits on this timer, made if nothing did.
    mutating func waitingMade() -> Waiting {
        if let waiting = self.waiting { return waiting }
        let waiting = Waiting()
        self.waiting = waiting
        return waiting
    }

    /// Ends a firing's turn: the firing that waited, if any, takes it, unless it went stale
    /// while it waited (a cancel, a reschedule) and would run nothing.
    mutating func nextFiring() -> Firing? {
        let waited = self.waiting?.firing
        self.waiting?.firing = nil
        self.dropWaitingIfEmpty()
        guard let firing = waited, firing.arming == self.arming, case .running = self.machine.state else {
            self.isDelivering = false
            return nil
        }
        return firing
    }

    mutating func takeCallers() -> [HandlerWaiter]? {
        guard let waiting = self.waiting, !waiting.callers.isEmpty else { return nil }
        let callers = waiting.callers
        waiting.callers = []
        self.dropWaitingIfEmpty()
        return callers
    }

    private mutating func dropWaitingIfEmpty() {
        if let waiting = self.waiting, waiting.callers.isEmpty, waiting.firing == nil { self.waiting = nil }
    }

    /// The handler, taken out once the timer is idle or cancelled: no firing runs it
    /// then, and the next schedule brings its own. Its captures may hold the timer's
    /// owner, so keeping it would keep that owner alive after a cancel.
    mutating func takeHandlerIfStopped() -> Handler? {
        switch self.machine.state {
        case .idle, .cancelled: self.handler.take()
        case .running, .suspended: nil
        }
    }
}
