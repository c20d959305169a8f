@preconcurrency import Dispatch
import Glibc

/// A public ``TimerBackend`` (GCD, a test double) as a seam: the backend hands out a handle
/// per arming and calls a closure per firing; this keeps the handles by id and tags each
/// firing with its arming's id. One per timer or expiry set.
final class BackendFiring: TimerFiring {
    private let timerBackend: any TimerBackend
    let backend: SafeDispatchTimer.Backend

    private struct Armings {
        var lastID: UInt64 = 0
        var handles: [UInt64: any ArmedTimer] = [:]
    }

    private let armings = LockedBox(Armings())

    init(_ timerBackend: any TimerBackend, as backend: SafeDispatchTimer.Backend) {
        self.timerBackend = timerBackend
        self.backend = backend
    }

    func now(_ clock: TimerClock) -> Int64 {
        self.timerBackend.now(clock)
    }

    func arm(_ schedule: TimerSchedule, clock: TimerClock, for receiver: TimerCore, replacing previous: UInt64?)
        throws(TimerError) -> UInt64
    {
        if let previous { self.disarm(previous) }
        let id = self.armings.withLockedValue { armings in
            armings.lastID += 1
            return armings.lastID
        }
        let target = WeakTimer(core: receiver)
        let queue = receiver.delivery?.queue
        let handle = self.timerBackend.arm(schedule, clock: clock, queue: queue) { tick in
            target.core?.receive(tick.on(clock), from: id, firedOnQueue: queue != nil)
        }
        // A backend says only that it can arm no more, as an engine that was shut down.
        guard let handle else { throw TimerError(code: ESHUTDOWN, operation: "TimerBackend.arm") }
        self.armings.withLockedValue { $0.handles[id] = handle }
        return id
    }

    func disarm(_ arming: UInt64) {
        self.armings.withLockedValue { $0.handles.removeValue(forKey: arming) }?.disarm()
    }
}

/// A timer held weakly: what a backend keeps never keeps the timer alive, so dropping the
/// timer cancels it. Unchecked as ``TimerCore`` is.
private struct WeakTimer: @unchecked Sendable {
    weak var core: TimerCore?
}
