@preconcurrency import Dispatch

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A public ``TimerBackend`` (GCD, a test double) as a seam, one per timer or expiry set,
/// and GCD's stand-in for a compiled-out engine: the backend hands out a handle per arming
/// and calls a closure per firing; this keeps each handle by an id, with the timer it
/// fires, and tags each firing with its arming's id. A stop disarms them all and refuses
/// new ones, for a backend that stands in for an engine.
final class BackendArmings: TimerFiring {
    let timerBackend: any TimerBackend

    private struct Arming {
        /// `nil` while the backend arms it: a firing may come before the handle does.
        var handle: (any ArmedTimer)?
        let timer: WeakTimer
        /// Until it is disarmed, or its one firing comes.
        var isArmed = true
    }

    private struct Table {
        var lastID: UInt64 = 0
        var isStopped = false
        /// Disarmed ones too, until they are replaced or retired: a stop tells their
        /// timers, as an engine's does.
        var armings: [UInt64: Arming] = [:]
    }

    private let table = LockedBox(Table())

    /// Entered by the first stop until it has told every timer: a stop that races it waits
    /// here, so that no stop returns with a timer still running or a handler still held.
    private let teardown = DispatchGroup()

    init(_ timerBackend: any TimerBackend) {
        self.timerBackend = timerBackend
    }

    func arm(_ schedule: TimerSchedule, clock: TimerClock, for receiver: TimerCore, replacing previous: UInt64?)
        throws(TimerError) -> UInt64
    {
        if let previous { self.retire(previous) }
        let target = WeakTimer(core: receiver)
        // Recorded before the backend arms it, so that a firing that comes at once (GCD
        // starts a source on arming) finds its arming to count out.
        let id = self.table.withLockedValue { table -> UInt64? in
            guard !table.isStopped else { return nil }
            table.lastID += 1
            table.armings[table.lastID] = Arming(handle: nil, timer: target)
            return table.lastID
        }
        guard let id else { throw .engineShutDown }
        let isOneShot = schedule.periodNanoseconds == nil
        let queue = receiver.delivery?.queue
        let handle = self.timerBackend.arm(schedule, clock: clock, queue: queue) { [weak self] tick in
            if isOneShot { self?.table.withLockedValue { $0.armings[id]?.isArmed = false } }
            target.core?.receive(tick.on(clock), from: id, firedOnQueue: queue != nil)
        }
        // A backend says only that it can arm no more, as an engine that was shut down.
        guard let handle else {
            self.table.withLockedValue { _ = $0.armings.removeValue(forKey: id) }
            throw .engineShutDown
        }
        // A stop that came meanwhile passed over this arming: it is refused here instead.
        let kept = self.table.withLockedValue { table in
            guard !table.isStopped else { return false }
            table.armings[id]?.handle = handle
            return true
        }
        guard kept else {
            handle.disarm()
            throw .engineShutDown
        }
        return id
    }

    func disarm(_ arming: UInt64) {
        self.table.withLockedValue { table in
            table.armings[arming]?.isArmed = false
            return table.armings[arming]?.handle
        }?.disarm()
    }

    func retire(_ arming: UInt64) {
        self.table.withLockedValue { $0.armings.removeValue(forKey: arming)?.handle }?.disarm()
    }

    /// How many armings are armed now: an engine's count of its armed timers.
    var armedCount: Int {
        self.table.withLockedValue { table in table.armings.values.count { $0.isArmed } }
    }

    func now(_ clock: TimerClock) -> Int64 {
        self.timerBackend.now(clock)
    }

    var hasStopped: Bool {
        self.table.withLockedValue { $0.isStopped }
    }

    /// Refuses armings from now on, disarms every one and tells the timers they fired that
    /// the seam let go of them (which cancels them and releases their handlers), once no
    /// lock is held: telling one takes its lock. The first stop does the work; one that
    /// races it waits until that is over, unless `waitingForAnother` is `false` (a stop
    /// from a handler, which the first stop may be waiting for).
    func stop(waitingForAnother: Bool) {
        let armings = self.table.withLockedValue { table -> [Arming]? in
            guard !table.isStopped else { return nil }
            table.isStopped = true
            self.teardown.enter()
            defer { table.armings = [:] }
            // One still being armed is its arming call's to refuse.
            return table.armings.values.filter { $0.handle != nil }
        }
        guard let armings else {
            if waitingForAnother { self.teardown.wait() }
            return
        }
        for arming in armings { arming.handle?.disarm() }
        for timer in armings.compactMap(\.timer.core) { timer.released() }
        self.teardown.leave()
    }
}

/// The engine where it is compiled out: a seam whose armings a ``BackendArmings`` keeps.
protocol BackendArmingsFiring: TimerFiring {
    var armings: BackendArmings { get }
}

extension BackendArmingsFiring {
    func now(_ clock: TimerClock) -> Int64 {
        self.armings.now(clock)
    }

    var hasStopped: Bool {
        self.armings.hasStopped
    }

    func arm(_ schedule: TimerSchedule, clock: TimerClock, for receiver: TimerCore, replacing previous: UInt64?)
        throws(TimerError) -> UInt64
    {
        try self.armings.arm(schedule, clock: clock, for: receiver, replacing: previous)
    }

    func disarm(_ arming: UInt64) {
        self.armings.disarm(arming)
    }

    func retire(_ arming: UInt64) {
        self.armings.retire(arming)
    }
}

/// A timer held weakly: what a backend keeps never keeps the timer alive, so dropping the
/// timer cancels it. Unchecked as ``TimerCore`` is.
private struct WeakTimer: @unchecked Sendable {
    weak var core: TimerCore?
}
