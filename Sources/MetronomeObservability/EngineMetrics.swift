#if Metrics
import Metrics
import Metronome

extension TimerEngine {
    /// Records the engine's counters as metrics every `interval`, until the task is
    /// cancelled or, with the `ServiceLifecycle` trait, a graceful shutdown begins.
    ///
    /// Counts become counters named `<prefix>_<name>_total` (wake-ups, firings, late
    /// firings, missed periods, coalesced and batched firings, clock steps); the armed
    /// timers and the bytes the engine holds become gauges `<prefix>_armed_timers` and
    /// `<prefix>_memory_bytes`.
    ///
    /// ```swift
    /// Task { await TimerEngine.shared.exportMetrics() }
    /// ```
    ///
    /// - Parameters:
    ///   - prefix: The start of every metric's label.
    ///   - interval: How often the counters are read.
    ///   - backend: What paces the reads; by default a timer on this engine, which counts
    ///     in its `armed` gauge.
    ///   - factory: Where the metrics go; by default the process's bootstrapped one.
    public func exportMetrics(
        prefix: String = "metronome",
        every interval: Duration = .seconds(10),
        pacedBy backend: SafeDispatchTimer.Backend? = nil,
        factory: any MetricsFactory = MetricsSystem.factory
    ) async {
        await untilGracefulShutdown {
            var metrics = EngineMetrics(prefix: prefix, engine: self, factory: factory)
            metrics.record(self.counters)
            for await _ in (backend ?? .engine(self)).ticks(every: interval) {
                metrics.record(self.counters)
            }
        }
    }
}

/// An engine's counters as swift-metrics metrics: counters grow by what changed since the
/// previous reading, gauges take the reading.
struct EngineMetrics {
    private let counters: [(Counter, KeyPath<TimerEngine.Counters, UInt64>)]
    private let armed: Gauge
    private let memory: Gauge
    private var previous: TimerEngine.Counters?

    init(prefix: String, engine: TimerEngine, factory: any MetricsFactory) {
        let dimensions = [("engine", engine.threadReport.threadName)]
        let counted: [(String, KeyPath<TimerEngine.Counters, UInt64>)] = [
            ("wakeups", \.wakeups), ("fired", \.fired), ("late", \.late), ("missed_periods", \.missedPeriods),
            ("coalesced", \.coalesced), ("batched", \.batched), ("clock_steps", \.clockSteps),
        ]
        self.counters = counted.map { name, path in
            (Counter(label: "\(prefix)_\(name)_total", dimensions: dimensions, factory: factory), path)
        }
        self.armed = Gauge(label: "\(prefix)_armed_timers", dimensions: dimensions, factory: factory)
        self.memory = Gauge(label: "\(prefix)_memory_bytes", dimensions: dimensions, factory: factory)
    }

    /// Records one reading. The first reading counts everything since the engine started.
    mutating func record(_ reading: TimerEngine.Counters) {
        for (counter, path) in self.counters {
            let grown = reading[keyPath: path] - (self.previous?[keyPath: path] ?? 0)
            if grown > 0 { counter.increment(by: Int64(clamping: grown)) }
        }
        self.armed.record(reading.armed)
        self.memory.record(reading.memoryBytes)
        self.previous = reading
    }
}
#endif
