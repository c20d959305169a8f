internal import CMetronome
@preconcurrency import Dispatch

/// The engine behind the firing seam: an arming is a C timer whose context is the receiver,
/// retained until the engine releases the timer. Arming allocates nothing, and a firing
/// reaches its receiver through that one pointer, with no retain and release.
extension TimerEngine: TimerFiring {
    func reserve(for receiver: FiringReceiver) -> UInt64? {
        guard let raw = self.raw else { return nil }
        let context = Unmanaged.passRetained(receiver)
        var id: mtr_timer_id = 0
        guard mtr_timer_create(raw, context.toOpaque(), &id) == 0 else {
            context.release()
            return nil
        }
        return id
    }

    func start(_ arming: UInt64, _ schedule: TimerSchedule, clock: TimerClock) -> Bool {
        guard let raw = self.raw else { return false }
        let code =
            if let period = schedule.periodNanoseconds {
                mtr_timer_arm_repeating(
                    raw, arming, clock.coreClock, schedule.deadlineNanoseconds, period, schedule.leewayNanoseconds)
            } else {
                mtr_timer_arm_once(raw, arming, clock.coreClock, schedule.deadlineNanoseconds, schedule.leewayNanoseconds)
            }
        return code == 0
    }

    /// Retires the C timer; the engine releases its receiver once no callback of it runs.
    func disarm(_ arming: UInt64) {
        if let raw = self.raw { _ = mtr_timer_destroy(raw, arming) }
    }
}

/// On the firing thread: hands the firing to its receiver, on the receiver's queue if it
/// has one.
let deliverFiring: mtr_fire_fn = { context, raw in
    let firing = raw.pointee
    let tick = Tick(
        scheduled: TimerInstant(nanoseconds: firing.scheduled_ns),
        fired: TimerInstant(nanoseconds: firing.fired_ns),
        missed: Int(clamping: firing.missed),
        sequence: firing.sequence
    )
    Unmanaged<FiringReceiver>.fromOpaque(context!)._withUnsafeGuaranteedRef { receiver in
        guard let queue = receiver.queue else { return receiver.receive(tick, from: firing.timer) }
        queue.async { receiver.receive(tick, from: firing.timer) }
    }
}

let releaseReceiver: mtr_release_fn = { context in
    Unmanaged<FiringReceiver>.fromOpaque(context!).release()
}
