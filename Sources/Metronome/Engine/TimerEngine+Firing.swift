#if Engine
internal import CMetronome
@preconcurrency import Dispatch
import Glibc

/// The engine as a seam: an arming is a C timer whose context is the receiver, retained
/// until the timer is retired. A receiver keeps its C timer from one arming to the next,
/// so every arming after the first is one C call (`mtr_timer_move_policy`: a later deadline on
/// the same clock in O(1); a timer whose ids run out is moved by the core itself, under a
/// fresh id), and a firing reaches its receiver through that one pointer.
extension TimerEngine: TimerFiring {
    func arm(_ schedule: TimerSchedule, clock: TimerClock, for receiver: TimerCore, replacing previous: UInt64?)
        throws(TimerError) -> UInt64
    {
        // An engine that failed to start is one that can arm nothing.
        guard let raw = self.raw else { throw .engineShutDown }
        var timer = previous ?? 0
        if previous == nil { timer = try Self.create(raw, for: receiver) }
        var moved: mtr_timer_id = 0
        let code = mtr_timer_move_policy(
            raw, timer, clock.coreClock, schedule.deadlineNanoseconds, schedule.periodNanoseconds ?? 0,
            schedule.leewayNanoseconds, schedule.missedTicks.corePolicy, &moved)
        if code == 0 { return moved }
        _ = mtr_timer_cancel(raw, timer)
        // Given up, retired elsewhere: its release takes the receiver's lock, held here.
        if previous == nil { DispatchQueue.global().async { [timer] in self.retire(timer) } }
        // A stop between the create and the move frees the slot, and the move meets a
        // stale id: its EINVAL means the engine stopped, which the caller is told.
        throw TimerError(code: self.hasStopped ? ESHUTDOWN : code, operation: "mtr_timer_move")
    }

    private static func create(_ raw: OpaquePointer, for receiver: TimerCore) throws(TimerError) -> UInt64 {
        let context = Unmanaged.passRetained(receiver)
        var id: mtr_timer_id = 0
        let code = mtr_timer_create(raw, context.toOpaque(), &id)
        if code != 0 { context.release() }
        try coreCall("mtr_timer_create") { code }
        return id
    }

    /// The id is always one this engine handed out, so the only answer is 0.
    func disarm(_ arming: UInt64) {
        if let raw = self.raw { _ = mtr_timer_cancel(raw, arming) }
    }

    /// Destroys the C timer; the engine releases its receiver once no callback of it runs.
    func retire(_ arming: UInt64) {
        if let raw = self.raw { _ = mtr_timer_destroy(raw, arming) }
    }
}

extension MissedTickPolicy {
    /// The C core's name for this policy.
    var corePolicy: mtr_missed_policy {
        switch self {
        case .burst: .MTR_MISSED_BURST
        case .delay: .MTR_MISSED_DELAY
        case .skip: .MTR_MISSED_SKIP
        }
    }
}

extension TimerClock {
    /// The C core's name for this clock.
    var coreClock: mtr_clock_id {
        switch self {
        case .monotonic: .MTR_CLOCK_MONOTONIC
        case .boottime: .MTR_CLOCK_BOOTTIME
        case .wall: .MTR_CLOCK_REALTIME
        }
    }
}

/// On the firing thread: hands the firing to its receiver, which runs it here or hands it
/// to its queue or executor.
let deliverFiring: mtr_fire_fn = { context, raw in
    let firing = raw.pointee
    Unmanaged<TimerCore>.fromOpaque(context!)._withUnsafeGuaranteedRef { receiver in
        let clock = receiver.clock
        let tick = Tick(
            scheduled: TimerInstant(nanoseconds: firing.scheduled_ns, clock: clock),
            fired: TimerInstant(nanoseconds: firing.fired_ns, clock: clock),
            missed: Int(clamping: firing.missed),
            sequence: firing.sequence
        )
        receiver.receive(tick, from: firing.timer, firedOnQueue: false)
    }
}

/// Tells the receiver its arming is gone before letting go of it: this may be the last
/// reference.
let releaseReceiver: mtr_release_fn = { context in
    let receiver = Unmanaged<TimerCore>.fromOpaque(context!)
    receiver._withUnsafeGuaranteedRef { $0.released() }
    receiver.release()
}
#endif
