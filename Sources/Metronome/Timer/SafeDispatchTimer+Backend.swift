@preconcurrency import Dispatch

extension SafeDispatchTimer.Backend {
    /// What fires a timer on this backend. `.dispatch` gets a private serial queue per timer,
    /// so that one timer's handlers never overlap, even across a reschedule that replaces its
    /// source.
    var firing: any TimerFiring {
        switch self {
        case .engine(let engine): engine
        case .dispatch: BackendArmings(DispatchBackend(fallbackQueue: DispatchQueue(label: "metronome.dispatch-timer")))
        case .custom(let backend): BackendArmings(backend)
        }
    }

    /// The backend that made `firing`: the seam does not know the names its callers give it.
    init(firing: any TimerFiring) {
        if let engine = firing as? TimerEngine {
            self = .engine(engine)
        } else if let backend = (firing as? BackendArmings)?.timerBackend, !(backend is DispatchBackend) {
            self = .custom(backend)
        } else {
            self = .dispatch
        }
    }
}
