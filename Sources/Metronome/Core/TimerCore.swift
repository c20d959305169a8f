@preconcurrency import Dispatch

/// A timer's core: its lock, its ``TimerStateMachine``, its handler and the receiver a seam
/// fires, in one object of 88 bytes that a firing reaches through one pointer.
///
/// The layer below every seam: it keeps the seam that fires it as an opaque object, so the
/// seams (the engine, a ``TimerBackend``'s armings) name this type and nothing above it. The
/// layers above arm and disarm through the seam under ``withLockedStorage(_:)``; this layer
/// runs firings: it decides under the lock, and runs the handler, a retirement and anything
/// that may call back into the timer unlocked.
///
/// A handler may call back into its timer, and `cancelAndWait` waits for handlers that take
/// the same lock. Nothing an arming hands out keeps the ``SafeDispatchTimer`` alive, so a
/// dropped timer is cancelled by its deinit rather than kept alive by its own schedule. No
/// `ManagedBuffer` can be `Sendable`, so its holders say with `nonisolated(unsafe)` that it
/// is safe from any thread: its mutable state is behind its lock.
final class TimerCore: ManagedBuffer<TimerState, UInt8> {
    /// An idle core fired by `seam`, which it keeps until it goes. `seamKind` tells the
    /// layers above which class of seam it is, without a look at the object.
    static func make(delivery: HandlerDelivery?, seam: AnyObject, seamKind: Bool, clock: TimerClock) -> TimerCore {
        // Counted from the first timer on, whatever its backend (see `deliveringInFork`).
        ForkGeneration.watch()
        let kept = Unmanaged.passRetained(seam)
        let route: TimerState.Route = delivery.map { .side(TimerSide(seam: kept, delivery: $0)) } ?? .seam(kept)
        let state = TimerState(clock: clock, hasDelivery: delivery != nil, seamKind: seamKind, route: route)
        return unsafeDowncast(TimerCore.create(minimumCapacity: 0) { _ in state }, to: TimerCore.self)
    }

    deinit {
        let state = self.storage
        state.pointee.route.seam.release()
        if state.pointee.delivering.hasWaiting { WaitingTable.remove(for: self) }
    }

    @inline(__always) private var storage: UnsafeMutablePointer<TimerState> {
        self.withUnsafeMutablePointerToHeader { $0 }
    }

    // Set once at creation: read without the lock.

    var clock: TimerClock { self.storage.pointee.identity.clock }

    /// What fires this timer, unretained: the core keeps it while it lives.
    var seam: Unmanaged<AnyObject> { self.storage.pointee.route.seam }

    /// The class of seam that fires this timer, as its maker said.
    var seamKind: Bool { self.storage.pointee.identity.seamKind }

    var delivery: HandlerDelivery? {
        // A timer made with a delivery keeps its side, where it lies, for good.
        guard self.storage.pointee.identity.hasDelivery, case .side(let side) = self.storage.pointee.route else {
            return nil
        }
        return side.delivery
    }

    /// Runs `body` on the state under the lock. A handler the timer no longer needs (see
    /// `takeHandlerIfStopped`) is released after unlocking: its captures' deinits may call
    /// back into this timer.
    @inline(__always)
    func withLockedStorage<Result, Failure: Error>(
        _ body: (inout TimerState) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        let state = self.storage
        TimerLock.lock(&state.pointee.lock)
        let result: Result
        do {
            result = try body(&state.pointee)
        } catch {
            let stopped = state.pointee.takeHandlerIfStopped()
            TimerLock.unlock(&state.pointee.lock)
            withExtendedLifetime(stopped) {}
            throw error
        }
        let stopped = state.pointee.takeHandlerIfStopped()
        TimerLock.unlock(&state.pointee.lock)
        withExtendedLifetime(stopped) {}
        return result
    }

    /// The seam let go of this timer, unlocked: if it stopped for good (`seamStopped`), the
    /// timer is cancelled and lets go of its handler, as a cancel would. Otherwise the owner
    /// retired it.
    func released(seamStopped: Bool) {
        guard seamStopped else { return }
        self.withLockedStorage { storage in
            storage.machine.abandon()
            storage.arming = 0
        }
    }

    /// A firing of `arming` where the seam fired it: run here when that is where the
    /// handler runs (the firing thread, or the queue a backend fired on), handed to the
    /// delivery otherwise.
    func receive(_ tick: Tick, from arming: UInt64, firedOnQueue: Bool) {
        // Read once per delivery: a handler that forks is told apart by a second read after it.
        let fork = ForkGeneration.current
        let firing = TimerState.Firing(tick: tick, arming: arming)
        guard self.storage.pointee.identity.hasDelivery else {
            return self.deliver(firing, admitted: false, inFork: fork)
        }
        switch self.delivery {
        case nil: self.deliver(firing, admitted: false, inFork: fork)
        case .queue where firedOnQueue: self.deliver(firing, admitted: false, inFork: fork)
        case .queue, .executor: self.enqueue(firing, inFork: fork)
        }
    }

    /// A firing for a timer with a delivery: it goes there unless one of this timer's is on
    /// its way or running, and then waits.
    private func enqueue(_ firing: TimerState.Firing, inFork fork: UInt32) {
        guard self.withLockedStorage({ self.admit(firing, inFork: fork, &$0) }) else { return }
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
            var callers: [HandlerWaiter]?
            next = self.withLockedStorage { storage -> TimerState.Firing? in
                guard admitted || self.admit(firing, inFork: fork, &storage) else { return nil }
                if storage.arming == firing.arming,
                    storage.machine.fired(scheduled: firing.tick.scheduled.nanoseconds) == .runHandler
                {
                    // A one-shot that fired is idle: its handler is moved out, not copied, and
                    // goes once it returns.
                    running = storage.takeHandlerIfStopped() ?? storage.handler
                    guard running == nil else {
                        storage.delivering.isHandlerRunning = true
                        return nil
                    }
                }
                // A delivery that ends without a handler frees who waited for it.
                let next = self.nextFiring(&storage)
                if next == nil { callers = self.takeCallers(&storage) }
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
            storage.delivering.isHandlerRunning = false
            guard storage.delivering.hasWaiting || storage.identity.hasDelivery else {
                // Nothing waits: the common end of a turn.
                storage.delivering.isDelivering = false
                return ([HandlerWaiter]?.none, TimerState.Firing?.none)
            }
            return (self.takeCallers(&storage), self.nextFiring(&storage))
        }
        callers?.forEach { $0.release() }
        return next
    }

    /// Queues the waiter `makeWaiter` builds, and returns what comes with it, only while a
    /// handler runs (or, with `includingDeliveries`, a delivery is under way); `nil` when
    /// none is, and nothing is made.
    func waitForHandlers<Wait>(
        includingDeliveries: Bool = false, _ makeWaiter: () -> (HandlerWaiter, Wait)
    ) -> Wait? {
        let fork = ForkGeneration.current
        return self.withLockedStorage { storage in
            guard storage.delivering.isHandlerRunning || includingDeliveries, storage.isBusy(inFork: fork) else {
                return nil
            }
            let (waiter, wait) = makeWaiter()
            self.waitingMade(&storage).callers.append(waiter)
            return wait
        }
    }

    // What waits on a busy timer lies in its side, for a timer with a delivery, and in the
    // ``WaitingTable`` otherwise, so that a timer that nothing waits on carries none of it.

    /// Takes `firing` for delivery, or has it wait its turn behind the one under way.
    /// A firing of an arming no longer current, or of a timer no longer running, is
    /// dropped here: it would run nothing, and a cancelled timer hands nothing more to its
    /// queue or executor.
    private func admit(_ firing: TimerState.Firing, inFork fork: UInt32, _ storage: inout TimerState) -> Bool {
        guard firing.arming == storage.arming, storage.machine.isRunning else { return false }
        guard storage.isBusy(inFork: fork) else {
            storage.delivering.isDelivering = true
            storage.delivering.isHandlerRunning = false
            storage.deliveringInFork = fork
            return true
        }
        let waiting = self.waitingMade(&storage)
        waiting.firing = waiting.firing.map { firing.merged(after: $0) } ?? firing
        return false
    }

    /// What waits on this timer, made if nothing did.
    private func waitingMade(_ storage: inout TimerState) -> Waiting {
        if case .side(let side) = storage.route { return side }
        if storage.delivering.hasWaiting { return WaitingTable.waiting(for: self)! }
        storage.delivering.hasWaiting = true
        return WaitingTable.make(for: self)
    }

    private func existingWaiting(_ storage: inout TimerState) -> Waiting? {
        if case .side(let side) = storage.route { return side }
        return storage.delivering.hasWaiting ? WaitingTable.waiting(for: self) : nil
    }

    /// Ends a firing's turn: the firing that waited, if any, takes it, unless it went stale
    /// while it waited (a cancel, a reschedule) and would run nothing.
    private func nextFiring(_ storage: inout TimerState) -> TimerState.Firing? {
        let waiting = self.existingWaiting(&storage)
        let waited = waiting?.firing
        waiting?.firing = nil
        self.dropWaitingIfEmpty(waiting, &storage)
        guard let firing = waited, firing.arming == storage.arming, storage.machine.isRunning else {
            storage.delivering.isDelivering = false
            return nil
        }
        return firing
    }

    private func takeCallers(_ storage: inout TimerState) -> [HandlerWaiter]? {
        guard let waiting = self.existingWaiting(&storage), !waiting.callers.isEmpty else { return nil }
        let callers = waiting.callers
        waiting.callers = []
        self.dropWaitingIfEmpty(waiting, &storage)
        return callers
    }

    private func dropWaitingIfEmpty(_ waiting: Waiting?, _ storage: inout TimerState) {
        guard storage.delivering.hasWaiting, let waiting, waiting.callers.isEmpty, waiting.firing == nil else {
            return
        }
        storage.delivering.hasWaiting = false
        WaitingTable.remove(for: self)
    }
}

/// What a ``TimerCore`` holds. Laid out by hand: the machine first, whose last byte is
/// followed by the one-byte fields, so that 72 bytes hold it all.
struct TimerState {
    var machine = TimerStateMachine()
    /// Reached only through ``TimerLock``, by ``TimerCore/withLockedStorage(_:)``.
    fileprivate var lock = TimerLockWord()
    /// Set once, and read without the lock.
    let identity: Identity
    var delivering = DeliveringFlags()
    /// The process's fork count (``ForkGeneration``) when the delivery began: in a
    /// child forked meanwhile, no thread delivers it, so it is over there.
    var deliveringInFork: UInt32 = 0
    /// The id of the timer's latest arming, armed or disarmed, 0 before the first: the
    /// one whose firings run the handler while the timer runs, and the one the next
    /// arming replaces.
    var arming: UInt64 = 0
    /// The seam, and the delivery of a timer given one; set once.
    let route: Route
    var handler: Handler?

    init(clock: TimerClock, hasDelivery: Bool, seamKind: Bool, route: Route) {
        self.identity = Identity(clock: clock, hasDelivery: hasDelivery, seamKind: seamKind)
        self.route = route
    }

    /// The clock, whether the timer has a delivery, and its kind of seam, in one byte.
    struct Identity {
        private let bits: UInt8

        init(clock: TimerClock, hasDelivery: Bool, seamKind: Bool) {
            let code: UInt8
            switch clock {
            case .monotonic: code = 0
            case .boottime: code = 1
            case .wall: code = 2
            }
            self.bits = code | (hasDelivery ? 0b100 : 0) | (seamKind ? 0b1000 : 0)
        }

        var clock: TimerClock {
            switch self.bits & 0b11 {
            case 1: .boottime
            case 2: .wall
            default: .monotonic
            }
        }

        var hasDelivery: Bool { self.bits & 0b100 != 0 }

        var seamKind: Bool { self.bits & 0b1000 != 0 }
    }

    /// Where a firing stands, in one byte.
    struct DeliveringFlags {
        private var bits: UInt8 = 0

        /// A firing is being delivered: on its way to the queue, or running the handler.
        /// Another that comes meanwhile waits its turn, merged with any other waiting, so
        /// that one timer's handlers never overlap (a dispatch source's never do, even on a
        /// concurrent queue) and a slow handler never has stale firings queued behind it.
        var isDelivering: Bool {
            get { self.bits & 0b1 != 0 }
            set { self.bits = newValue ? self.bits | 0b1 : self.bits & ~0b1 }
        }

        var isHandlerRunning: Bool {
            get { self.bits & 0b10 != 0 }
            set { self.bits = newValue ? self.bits | 0b10 : self.bits & ~0b10 }
        }

        /// The timer, which has no side, has an entry in the ``WaitingTable``.
        var hasWaiting: Bool {
            get { self.bits & 0b100 != 0 }
            set { self.bits = newValue ? self.bits | 0b100 : self.bits & ~0b100 }
        }
    }

    /// The seam, kept by the core; with the delivery, for a timer given one.
    enum Route {
        case seam(Unmanaged<AnyObject>)
        case side(TimerSide)

        var seam: Unmanaged<AnyObject> {
            switch self {
            case .seam(let seam): seam
            case .side(let side): side.seam
            }
        }
    }

    /// The user's handler, wrapped so that passing it out of the lock's generic closure
    /// does not re-abstract (and allocate) it on every firing.
    struct Handler {
        let run: @Sendable (Tick) -> Void
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

    /// Whether a delivery is under way in the process of fork count `fork`.
    func isBusy(inFork fork: UInt32) -> Bool {
        self.delivering.isDelivering && self.deliveringInFork == fork
    }

    /// The handler, taken out once the timer is idle or cancelled: no firing runs it
    /// then, and the next schedule brings its own. Its captures may hold the timer's
    /// owner, so keeping it would keep that owner alive after a cancel.
    @inline(__always)
    mutating func takeHandlerIfStopped() -> Handler? {
        guard self.handler != nil, self.machine.isStopped else { return nil }
        return self.handler.take()
    }
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

/// What waits on a busy timer: callers for its handler to end, and a firing for its turn.
/// Reached only under the timer's lock.
class Waiting {
    /// Callers in `cancelAndWait` or `cancelAndAwaitHandlers`; released when the handler ends.
    var callers: [HandlerWaiter] = []
    var firing: TimerState.Firing?
}

/// What a timer given a delivery carries besides its state: the delivery, its seam, and
/// what waits on it, made with it and kept while it lives.
final class TimerSide: Waiting {
    let seam: Unmanaged<AnyObject>
    let delivery: HandlerDelivery

    init(seam: Unmanaged<AnyObject>, delivery: HandlerDelivery) {
        self.seam = seam
        self.delivery = delivery
    }
}

/// What waits on busy timers without a side, by timer: a timer has an entry only while a
/// firing waits its turn or a caller waits for its handler, which a timer whose firings
/// never overlap and that nobody waits on never needs. Split by address, so that timers
/// on different threads rarely share a lock; always taken under the timer's own.
enum WaitingTable {
    private static let parts = (0..<16).map { _ in LockedBox([ObjectIdentifier: Waiting]()) }

    private static func part(of core: TimerCore) -> LockedBox<[ObjectIdentifier: Waiting]> {
        let address = UInt(bitPattern: Unmanaged.passUnretained(core).toOpaque())
        return Self.parts[Int((address >> 4 ^ address >> 9) % UInt(Self.parts.count))]
    }

    static func waiting(for core: TimerCore) -> Waiting? {
        Self.part(of: core).withLockedValue { $0[ObjectIdentifier(core)] }
    }

    static func make(for core: TimerCore) -> Waiting {
        let waiting = Waiting()
        Self.part(of: core).withLockedValue { $0[ObjectIdentifier(core)] = waiting }
        return waiting
    }

    static func remove(for core: TimerCore) {
        _ = Self.part(of: core).withLockedValue { $0.removeValue(forKey: ObjectIdentifier(core)) }
    }
}
