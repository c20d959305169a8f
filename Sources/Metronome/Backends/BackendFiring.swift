@preconcurrency import Dispatch
import Glibc

/// A public ``TimerBackend`` (GCD, a test double) behind the firing seam.
///
/// The backend hands out a handle per arming and calls a closure per firing; this keeps the
/// handles by arming id and tags each firing with its id, so a timer on any backend takes
/// the same path as one on the engine. One per timer: it only ever holds that timer's
/// armings, usually one.
final class BackendFiring: TimerFiring {
    let backend: any TimerBackend

    /// The receiver is held weakly: what a backend keeps never keeps the timer alive, so
    /// dropping the timer cancels it.
    private struct Arming {
        weak var receiver: FiringReceiver?
        var handle: (any ArmedTimer)?
    }

    private struct Armings {
        var lastID: UInt64 = 0
        var byID: [UInt64: Arming] = [:]
    }

    private let armings = LockedBox(Armings())

    init(_ backend: any TimerBackend) {
        self.backend = backend
    }

    func now(_ clock: TimerClock) -> Int64 {
        self.backend.now(clock)
    }

    func reserve(for receiver: FiringReceiver) -> UInt64 {
        self.armings.withLockedValue { armings in
            armings.lastID += 1
            armings.byID[armings.lastID] = Arming(receiver: receiver)
            return armings.lastID
        }
    }

    func start(_ arming: UInt64, _ schedule: TimerSchedule, clock: TimerClock) throws(TimerError) {
        // Gone: a later transition disarmed this arming before it started.
        guard let receiver = self.armings.withLockedValue({ $0.byID[arming]?.receiver }) else { return }
        let handle = self.backend.arm(schedule, clock: clock, queue: receiver.queue) { [weak receiver] tick in
            receiver?.receive(tick, from: arming)
        }
        // A backend says only that it can arm no more, as an engine that was shut down.
        guard let handle else { throw TimerError(code: ESHUTDOWN, operation: "TimerBackend.arm") }
        // A disarm that came first removed the arming: the handle is stopped here instead.
        let kept = self.armings.withLockedValue { armings in
            guard armings.byID[arming] != nil else { return false }
            armings.byID[arming]?.handle = handle
            return true
        }
        if !kept { handle.disarm() }
    }

    func disarm(_ arming: UInt64) {
        let handle = self.armings.withLockedValue { armings in
            armings.byID.removeValue(forKey: arming)?.handle
        }
        handle?.disarm()
    }
}
