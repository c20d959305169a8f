#if Logging
import Logging
import Metronome

extension TimerEngine {
    /// Logs what needs an operator's attention, until the task is cancelled or, with the
    /// `ServiceLifecycle` trait, a graceful shutdown begins: at once, a refused real-time
    /// priority or CPU affinity (warning); then, read every `interval`, clock steps (notice)
    /// and firings later than the engine's late threshold (warning).
    ///
    /// ```swift
    /// Task { await engine.logEvents(to: Logger(label: "metronome")) }
    /// ```
    ///
    /// - Parameters:
    ///   - logger: Where the events go; each carries the engine's thread name as metadata.
    ///   - interval: How often the counters are read.
    ///   - backend: What paces the reads; by default a timer on this engine, which counts
    ///     in its `armed` counter.
    public func logEvents(
        to logger: Logger,
        every interval: Duration = .seconds(1),
        pacedBy backend: SafeDispatchTimer.Backend? = nil
    ) async {
        await untilGracefulShutdown {
            var log = EngineEventLog(engine: self, logger: logger)
            log.report(self.threadReport)
            for await _ in (backend ?? .engine(self)).ticks(every: interval) {
                log.record(self.counters)
            }
        }
    }
}

/// Turns an engine's reports and counter readings into log events.
struct EngineEventLog {
    private var logger: Logger
    private var previous: TimerEngine.Counters

    init(engine: TimerEngine, logger: Logger) {
        self.logger = logger
        self.logger[metadataKey: "engine"] = "\(engine.threadReport.threadName)"
        self.previous = engine.counters
    }

    /// Logs the thread settings the engine asked for and did not get.
    func report(_ report: TimerEngine.ThreadReport) {
        if let refusal = report.realtimeRefusal {
            self.logger.warning("real-time priority refused", metadata: ["error": "\(refusal)"])
        }
        if let refusal = report.cpuRefusal {
            self.logger.warning("CPU affinity refused", metadata: ["error": "\(refusal)"])
        }
    }

    /// Logs what changed since the previous reading.
    mutating func record(_ counters: TimerEngine.Counters) {
        defer { self.previous = counters }
        if counters.clockSteps > self.previous.clockSteps {
            self.logger.notice(
                "wall clock stepped; wall-clock timers re-evaluated",
                metadata: ["steps": "\(counters.clockSteps - self.previous.clockSteps)"]
            )
        }
        if counters.late > self.previous.late {
            self.logger.warning(
                "timer firings later than the late threshold",
                metadata: [
                    "late": "\(counters.late - self.previous.late)",
                    "missedPeriods": "\(counters.missedPeriods - self.previous.missedPeriods)",
                ]
            )
        }
    }
}
#endif
