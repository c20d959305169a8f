/// A public ``TimerBackend`` (GCD, a test double) as a seam, through its
/// ``BackendArmings``. One per timer or expiry set.
final class BackendFiring: BackendArmingsFiring {
    let armings: BackendArmings
    let backend: SafeDispatchTimer.Backend

    init(_ timerBackend: any TimerBackend, as backend: SafeDispatchTimer.Backend) {
        self.armings = BackendArmings(timerBackend)
        self.backend = backend
    }
}
