@preconcurrency import Dispatch

/// What fires timers: the engine, or a public ``TimerBackend`` (GCD, a test double)
/// through ``BackendArmings``. It takes a schedule and a receiver to fire, and knows
/// nothing else of what is built on it.
///
/// An arming is named by an id that each of its firings carries; the timer runs a firing
/// only for the arming it recorded last. The timer arms under its own lock and records the
/// id before unlocking, so the first firing always finds it: a seam never fires from inside
/// ``arm(_:clock:for:replacing:)`` and never calls back into a timer from inside
/// ``arm(_:clock:for:replacing:)`` or ``disarm(_:)``.
protocol TimerFiring: AnyObject, Sendable {
    /// The current time on `clock`, in nanoseconds, as this seam's firings measure it.
    func now(_ clock: TimerClock) -> Int64
    /// Arms `schedule` in place of the arming `previous` (armed or not), if there is one,
    /// and returns the id every firing of `schedule` carries. Throws why it refused
    /// (`ESHUTDOWN` for an engine shut down, `ENOMEM`), with `previous` disarmed.
    func arm(_ schedule: TimerSchedule, clock: TimerClock, for receiver: TimerCore, replacing previous: UInt64?)
        throws(TimerError) -> UInt64
    /// Stops `arming`'s firings; a later ``arm(_:clock:for:replacing:)`` may reuse it.
    /// Never waits for a running firing.
    func disarm(_ arming: UInt64)
    /// Lets go of `arming` for good. The engine releases its timer here, so the caller
    /// holds none of the timer's locks.
    func retire(_ arming: UInt64)
    /// Whether this seam has stopped for good: it dropped every arming and refuses new ones.
    var hasStopped: Bool { get }
    /// Whether this seam is a dead copy in a forked child.
    var isInherited: Bool { get }
}

extension TimerFiring {
    func now(_ clock: TimerClock) -> Int64 {
        clock.nanosecondsNow
    }

    var hasStopped: Bool { false }

    var isInherited: Bool { false }

    func retire(_ arming: UInt64) {
        self.disarm(arming)
    }
}
