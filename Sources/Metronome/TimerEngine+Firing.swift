internal import CMetronome
@preconcurrency import Dispatch
import Glibc

/// The engine behind the firing seam: an arming is a C timer whose context is the receiver,
/// retained until the engine releases the timer. Arming allocates nothing, and a firing
/// reaches its receiver through that one pointer, with no retain and release.
extension TimerEngine: TimerFiring {
    func reserve(for receiver: FiringReceiver) throws(TimerError) -> UInt64 {
        // An engine that failed to start is one that can arm nothing.
        guard let raw = self.raw else { throw TimerError(code: ESHUTDOWN, operation: "mtr_timer_create") }
        let context = Unmanaged.passRetained(receiver)
        var id: mtr_timer_id = 0
        do {
            try coreCall("mtr_timer_create") { mtr_timer_create(raw, context.toOpaque(), &id) }
        } catch {
            context.release()
            throw error
        }
        return id
    }

    func start(_ arming: UInt64, _ schedule: TimerSchedule, clock: TimerClock) throws(TimerError) {
        guard let raw = self.raw else { throw TimerError(code: ESHUTDOWN, operation: "mtr_timer_arm") }
        let deadline = schedule.deadlineNanoseconds
        let leeway = schedule.leewayNanoseconds
        if let period = schedule.periodNanoseconds {
            try coreCall("mtr_timer_arm_repeating") {
                mtr_timer_arm_repeating(raw, arming, clock.coreClock, deadline, period, leeway)
            }
        } else {
            try coreCall("mtr_timer_arm_once") { mtr_timer_arm_once(raw, arming, clock.coreClock, deadline, leeway) }
        }
    }

    /// The later deadlines of idle timeouts take the core's O(1) path this way. Ids spent
    /// (`ERANGE`) leave the timer to arm anew.
    func move(_ arming: UInt64, _ schedule: TimerSchedule, clock: TimerClock) throws(TimerError) -> UInt64? {
        guard let raw = self.raw else { throw TimerError(code: ESHUTDOWN, operation: "mtr_timer_move") }
        var moved: mtr_timer_id = 0
        let code = mtr_timer_move(
            raw, arming, clock.coreClock, schedule.deadlineNanoseconds, schedule.periodNanoseconds ?? 0,
            schedule.leewayNanoseconds, &moved)
        if code == ERANGE { return nil }
        try coreCall("mtr_timer_move") { code }
        return moved
    }

    /// An arm or move fails only once the engine stops, whose shutdown cancels every
    /// timer anyway; a stopping engine, or one a forked child inherited, refuses the move
    /// at once instead. Memory is the exception, for the re-arm only: putting the fired
    /// timer back into its heap may have to grow the heap (and a move whose ids are spent,
    /// once in 2^31, creates a C timer), so without memory the timer ends cancelled.
    var keepsArmingsMovedLater: Bool { !self.hasStopped && !self.isInherited }

    /// Retires the C timer; the engine releases its receiver once no callback of it runs.
    /// The id is always one this engine handed out, so the only answer is 0.
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
        if receiver.queue == nil {
            receiver.receive(tick, from: firing.timer)
        } else {
            receiver.enqueue(tick, from: firing.timer)
        }
    }
}

/// Tells the receiver its arming is gone before letting go of it: this may be the last
/// reference.
let releaseReceiver: mtr_release_fn = { context in
    let receiver = Unmanaged<FiringReceiver>.fromOpaque(context!)
    receiver._withUnsafeGuaranteedRef { $0.released() }
    receiver.release()
}
