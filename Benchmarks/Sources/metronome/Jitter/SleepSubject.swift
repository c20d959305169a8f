@preconcurrency import Dispatch
import Metronome
import MetronomeMeasurements

/// A jitter subject that sleeps instead of arming a timer: a task looping on
/// `Task.sleep(until:tolerance:clock:)` to each absolute deadline, on Metronome's
/// `EngineClock` (`sleep-engine`) or the standard `ContinuousClock` (`sleep-continuous`),
/// which on Linux hops through libdispatch's timer manager.
///
/// On a measuring thread with a CPU the task prefers a ``PinnedTaskExecutor`` on that CPU,
/// so it resumes there; otherwise it runs on Swift's cooperative pool.
struct SleepJitterSubject<C: Clock>: JitterSubject where C.Duration == Duration {
    let name: String
    let clock: C
    /// An instant of the clock as nanoseconds of a fixed epoch, so lateness is taken on the
    /// clock the sleep was measured against.
    let nanoseconds: @Sendable (C.Instant) -> Int64
    /// The CPU the task resumes on, or `nil` for any.
    let cpu: Int?

    func run(_ config: JitterConfiguration, recorder: LatencyRecorder) throws -> SubjectCounters {
        let done = DispatchSemaphore(value: 0)
        let executor = try self.cpu.map { try PinnedTaskExecutor(cpu: $0) }
        defer { executor?.stop() }
        let task = Task(executorPreference: executor) {
            let start = self.clock.now.advanced(by: .nanoseconds(config.startLeadNanoseconds))
            let interval = Duration.nanoseconds(config.intervalNanoseconds)
            let tolerance = Duration.nanoseconds(config.leewayNanoseconds)
            var deadline = start
            while !recorder.isComplete {
                try? await Task.sleep(until: deadline, tolerance: tolerance, clock: self.clock)
                if Task.isCancelled { break }
                recorder.record(
                    scheduledNanoseconds: self.nanoseconds(deadline),
                    firedNanoseconds: self.nanoseconds(self.clock.now),
                    missed: 0
                )
                MonotonicTime.spin(nanoseconds: config.handlerWorkNanoseconds)
                deadline = deadline.advanced(by: interval)
            }
            done.signal()
        }
        let completed = recorder.waitUntilComplete(timeout: config.completionTimeout)
        task.cancel()
        done.wait()
        guard completed else {
            throw MeasurementError.timedOut(
                backend: self.name, recorded: recorder.summary.samples, expected: recorder.target)
        }
        return SubjectCounters()
    }
}

extension SleepJitterSubject where C == EngineClock {
    init(engine: TimerEngine, cpu: Int?) {
        self.init(
            name: "sleep-engine", clock: EngineClock(backend: .engine(engine)), nanoseconds: { $0.nanoseconds },
            cpu: cpu)
    }
}

extension SleepJitterSubject where C == ContinuousClock {
    init(cpu: Int?) {
        let epoch = ContinuousClock.now
        self.init(
            name: "sleep-continuous", clock: ContinuousClock(),
            nanoseconds: { instant in epoch.duration(to: instant).saturatingNanoseconds }, cpu: cpu)
    }
}
