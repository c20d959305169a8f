internal import CMetronome
@preconcurrency import Dispatch

/// Fires timers from a ``TimerEngine``: the default, lowest-latency backend.
struct EngineBackend: TimerBackend {
    let engine: TimerEngine

    func arm(
        _ schedule: TimerSchedule,
        clock: TimerClock,
        queue: DispatchQueue?,
        fire: @escaping @Sendable (Tick) -> Void
    ) -> (any ArmedTimer)? {
        self.engine.arm(schedule, clock: clock, delivery: EngineDelivery(queue: queue, fire: fire))
    }
}

/// A C timer's context: where and how its firings are delivered. The core holds one
/// retain, released exactly once through the engine's release callback.
final class EngineDelivery: Sendable {
    private let queue: DispatchQueue?
    private let fire: @Sendable (Tick) -> Void

    init(queue: DispatchQueue?, fire: @escaping @Sendable (Tick) -> Void) {
        self.queue = queue
        self.fire = fire
    }

    func deliver(_ tick: mtr_tick) {
        let tick = Tick(
            scheduled: TimerInstant(nanoseconds: tick.scheduled_ns),
            fired: TimerInstant(nanoseconds: tick.fired_ns),
            missed: Int(clamping: tick.missed),
            sequence: tick.sequence
        )
        if let queue = self.queue {
            let fire = self.fire
            queue.async { fire(tick) }
        } else {
            self.fire(tick)
        }
    }
}

/// One C timer. Holding the engine keeps the C handle alive for as long as this exists.
struct EngineArmedTimer: ArmedTimer {
    let engine: TimerEngine
    let id: UInt64

    func disarm() {
        self.engine.destroy(self.id)
    }
}
