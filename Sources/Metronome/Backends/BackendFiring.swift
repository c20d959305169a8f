@preconcurrency import Dispatch

/// A public ``TimerBackend`` (GCD, a test double) as a seam, through its
/// ``BackendArmings``. One per timer or expiry set.
final class BackendFiring: TimerFiring {
    private let armings: BackendArmings
    let backend: SafeDispatchTimer.Backend

    init(_ timerBackend: any TimerBackend, as backend: SafeDispatchTimer.Backend) {
        self.armings = BackendArmings(timerBackend)
        self.backend = backend
    }

    func now(_ clock: TimerClock) -> Int64 {
        self.armings.timerBackend.now(clock)
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
