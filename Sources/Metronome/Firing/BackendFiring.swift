/// A public ``TimerBackend`` (GCD, a test double) as a seam, through its
/// ``BackendArmings``. One per timer or expiry set.
final class BackendFiring: BackendArmingsFiring {
    let armings: BackendArmings

    init(_ timerBackend: any TimerBackend) {
        self.armings = BackendArmings(timerBackend)
    }

    var timerBackend: any TimerBackend {
        self.armings.timerBackend
    }
}
