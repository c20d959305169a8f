import Metronome
import MetronomeMeasurements
import Synchronization

/// A jitter subject on Metronome: `SafeDispatchTimer`s with handlers inline on the
/// engine's firing thread, or on GCD through the same API (`gcd-safe`).
struct SafeTimerJitterSubject: JitterSubject {
    let name: String
    let backend: SafeDispatchTimer.Backend
    let engine: TimerEngine?

    func run(_ config: JitterConfiguration, recorder: LatencyRecorder) throws -> SubjectCounters {
        let before = self.engine?.counters
        let start = config.start()
        let timers = (0..<config.timers).map { index in
            let timer = SafeDispatchTimer(backend: self.backend, clock: config.clock.timerClock)
            timer.schedule(
                at: TimerInstant(
                    nanoseconds: config.deadline(timer: index, tick: 0, start: start), clock: config.clock.timerClock),
                every: .nanoseconds(config.intervalNanoseconds),
                leeway: .nanoseconds(config.leewayNanoseconds)
            ) { tick in
                // Handler entry on the same clock as every other subject, not tick.fired;
                // lateness from the earliest deadline the firing covers, as for the others.
                recorder.record(
                    scheduledNanoseconds: tick.scheduled.nanoseconds - Int64(tick.missed) * config.intervalNanoseconds,
                    firedNanoseconds: config.clock.now(),
                    missed: tick.missed
                )
                MonotonicTime.spin(nanoseconds: config.handlerWorkNanoseconds)
            }
            return timer
        }
        let completed = recorder.waitUntilComplete(timeout: config.completionTimeout)
        timers.forEach { $0.cancelAndWait() }
        guard completed else {
            throw MeasurementError.timedOut(
                backend: self.name, recorded: recorder.summary.samples, expected: recorder.target)
        }
        guard let engine = self.engine, let before else { return SubjectCounters() }
        return SubjectCounters(wakeups: Int(engine.counters.wakeups - before.wakeups))
    }
}

extension MeasurementClock {
    /// The library's name for this clock.
    var timerClock: TimerClock {
        switch self {
        case .monotonic: .monotonic
        case .boottime: .boottime
        case .wall: .wall
        }
    }
}

/// A coalesce subject on Metronome's engine: one one-shot `SafeDispatchTimer` per deadline.
struct EngineCoalesceSubject: CoalesceSubject {
    let name = "engine"
    let engine: TimerEngine

    func run(_ config: CoalesceConfiguration, deadlines: [Int64], recorder: CoalesceRecorder) throws
        -> SubjectCounters
    {
        let before = self.engine.counters
        let timers = deadlines.map { deadline in
            let timer = SafeDispatchTimer(backend: .engine(self.engine))
            timer.schedule(at: TimerInstant(nanoseconds: deadline), leeway: .nanoseconds(config.leewayNanoseconds)) {
                tick in
                recorder.record(deadlineNanoseconds: tick.scheduled.nanoseconds, firedNanoseconds: MonotonicTime.now())
            }
            return timer
        }
        let completed = recorder.waitUntilComplete(timeout: config.completionTimeout)
        timers.forEach { $0.cancelAndWait() }
        guard completed else {
            throw MeasurementError.timedOut(backend: self.name, recorded: recorder.firings, expected: config.timers)
        }
        return SubjectCounters(wakeups: Int(self.engine.counters.wakeups - before.wakeups))
    }
}
