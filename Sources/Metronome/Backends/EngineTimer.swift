/// One C timer of a ``TimerEngine``, firing a `TimerCore` (see `TimerCore.Firing`).
/// Holding the engine keeps the C handle alive for as long as this exists.
struct EngineTimer: ArmedTimer {
    let engine: TimerEngine
    let id: UInt64

    /// Arms it; `false` once the engine has stopped or the timer was destroyed.
    func start(_ schedule: TimerSchedule, clock: TimerClock) -> Bool {
        self.engine.start(self.id, schedule, clock: clock)
    }

    func disarm() {
        self.engine.destroy(self.id)
    }
}
