import Foundation
import MetronomeMeasurements
import Metronome

/// One subject's row of `metronome stress`; JSON keys are part of the stable schema.
struct StressResult: Codable, Sendable {
    /// An engine's counters at the end of the run.
    struct EngineCounters: Codable, Sendable {
        var wakeups: UInt64
        var fired: UInt64
        var late: UInt64
        var missedPeriods: UInt64
        var armed: UInt64
        var coalesced: UInt64
        var clockSteps: UInt64

        init(_ counters: TimerEngine.Counters) {
            self.wakeups = counters.wakeups
            self.fired = counters.fired
            self.late = counters.late
            self.missedPeriods = counters.missedPeriods
            self.armed = counters.armed
            self.coalesced = counters.coalesced
            self.clockSteps = counters.clockSteps
        }

        enum CodingKeys: String, CodingKey {
            case wakeups, fired, late, armed, coalesced
            case missedPeriods = "missed_periods"
            case clockSteps = "clock_steps"
        }
    }

    /// `engine`, `dispatch`, `scheduler`, or `all` for the sum.
    var backend: String
    var operations: Int
    var operationsPerSecond: Double
    var operationsByKind: [String: Int]
    /// Handler entries (for the scheduler: `executed` events).
    var handlerEntries: Int
    var oneShotFirings: Int?
    var repeatingTicks: Int?
    /// The sum of `missed` over the ticks handlers saw.
    var missedPeriods: Int?
    /// Handlers that cancelled, rescheduled or dropped their own timer, or spun.
    var handlerSelfOperations: Int?
    /// Handler entries judged after a stop or reschedule (the in-flight ones): how often
    /// the "nothing after cancel/suspend/reschedule" checks really applied.
    var gatedEntries: Int?
    /// Handler contexts created (one per schedule call); all must be released by the end.
    var handlerContexts: Int?
    /// The scheduler's `cancelled` events.
    var cancelledEvents: Int?
    var violationsTotal: Int
    /// Every invariant by its key, zeros included.
    var violations: [String: Int]
    var engineCounters: EngineCounters?

    init(
        backend: String,
        seconds: Double,
        operationsByKind: [String: Int],
        handlerEntries: Int,
        oneShotFirings: Int? = nil,
        repeatingTicks: Int? = nil,
        missedPeriods: Int? = nil,
        handlerSelfOperations: Int? = nil,
        gatedEntries: Int? = nil,
        handlerContexts: Int? = nil,
        cancelledEvents: Int? = nil,
        violations: [StressInvariant: Int],
        engineCounters: EngineCounters? = nil
    ) {
        self.backend = backend
        self.operationsByKind = operationsByKind
        self.operations = operationsByKind.values.reduce(0, +)
        self.operationsPerSecond = seconds > 0 ? Double(self.operations) / seconds : 0
        self.handlerEntries = handlerEntries
        self.oneShotFirings = oneShotFirings
        self.repeatingTicks = repeatingTicks
        self.missedPeriods = missedPeriods
        self.handlerSelfOperations = handlerSelfOperations
        self.gatedEntries = gatedEntries
        self.handlerContexts = handlerContexts
        self.cancelledEvents = cancelledEvents
        self.violations = Dictionary(uniqueKeysWithValues: StressInvariant.allCases.map { ($0.rawValue, violations[$0] ?? 0) })
        self.violationsTotal = violations.values.reduce(0, +)
        self.engineCounters = engineCounters
    }

    /// The sum of `results` (their shared `seconds`), as the `all` row.
    static func total(_ results: [StressResult], seconds: Double, violations: [StressInvariant: Int]) -> StressResult {
        var operations: [String: Int] = [:]
        for result in results {
            operations.merge(result.operationsByKind.map { ("\(result.backend).\($0.key)", $0.value) }) { $0 + $1 }
        }
        return StressResult(
            backend: "all",
            seconds: seconds,
            operationsByKind: operations,
            handlerEntries: results.reduce(0) { $0 + $1.handlerEntries },
            violations: violations
        )
    }

    enum CodingKeys: String, CodingKey {
        case backend, operations, violations
        case operationsPerSecond = "ops_per_s"
        case operationsByKind = "operations_by_kind"
        case handlerEntries = "handler_entries"
        case oneShotFirings = "one_shot_firings"
        case repeatingTicks = "repeating_ticks"
        case missedPeriods = "missed_periods"
        case handlerSelfOperations = "handler_self_operations"
        case gatedEntries = "gated_entries"
        case handlerContexts = "handler_contexts"
        case cancelledEvents = "cancelled_events"
        case violationsTotal = "violations_total"
        case engineCounters = "engine_counters"
    }
}

/// The settings of a stress run, echoed in its JSON.
struct StressConfiguration: Codable, Sendable {
    var threads: Int
    var durationSeconds: Double?
    var operations: Int?
    var load: Int
    var timers: Int
    var backends: [String]
    var seed: UInt64

    enum CodingKeys: String, CodingKey {
        case threads, operations, load, timers, backends, seed
        case durationSeconds = "duration_s"
    }
}

/// The tables `metronome stress` prints.
enum StressTable {
    /// Throughput and activity, one row per subject and the total.
    static func summary(_ results: [StressResult]) -> String {
        let header = ["backend", "operations", "ops/s", "handlers", "one-shots", "ticks", "missed", "self-ops", "gated", "violations"]
        func text(_ value: Int?) -> String { value.map { "\($0)" } ?? "–" }
        let rows = results.map { result -> [String] in
            let rate: String = String(format: "%.0f", result.operationsPerSecond)
            var row: [String] = [result.backend, "\(result.operations)", rate, "\(result.handlerEntries)"]
            row.append(text(result.oneShotFirings))
            row.append(text(result.repeatingTicks))
            row.append(text(result.missedPeriods))
            row.append(text(result.handlerSelfOperations))
            row.append(text(result.gatedEntries))
            row.append("\(result.violationsTotal)")
            return row
        }
        return ResultTable.render(header: header, rows: rows)
    }

    /// One row per invariant, one column per subject.
    static func violations(_ results: [StressResult]) -> String {
        let header = ["invariant"] + results.map(\.backend)
        let rows = StressInvariant.allCases.map { invariant in
            [invariant.summary] + results.map { "\($0.violations[invariant.rawValue] ?? 0)" }
        }
        return ResultTable.render(header: header, rows: rows)
    }
}
