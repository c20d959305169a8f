@preconcurrency import Dispatch

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
    /// The process's fork count (`mtr_fork_generation`) when the delivery began: in a
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
