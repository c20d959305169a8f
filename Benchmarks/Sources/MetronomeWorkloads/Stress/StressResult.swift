import Foundation
import Metronome
import MetronomeMeasurements

/// One subject's row of `metronome stress`; JSON keys are part of the stable schema.
public struct StressResult: Codable, Sendable {
    /// A subject's name from `StressSubjects.names`, or `all` for the sum.
    public var backend: String
    public var operations: Int
    public var operationsPerSecond: Double
    public var operationsByKind: [String: Int]
    /// Handler entries (for the scheduler: `executed` events; for expiring values: expiries).
    public var handlerEntries: Int
    public var oneShotFirings: Int?
    public var repeatingTicks: Int?
    /// The sum of `missed` over the ticks handlers saw.
    public var missedPeriods: Int?
    /// Handlers that cancelled, rescheduled or dropped their own timer, or spun.
    public var handlerSelfOperations: Int?
    /// Handler entries judged after a stop or reschedule (the in-flight ones): how often
    /// the "nothing after cancel/suspend/reschedule" checks really applied.
    public var gatedEntries: Int?
    /// Handler contexts created (one per schedule call); all must be released by the end.
    public var handlerContexts: Int?
    /// The scheduler's `cancelled` events.
    public var cancelledEvents: Int?
    public var violationsTotal: Int
    /// Every invariant by its key, zeros included.
    public var violations: [String: Int]
    /// The engine's counters at the end of the run, by their JSON key.
    public var engineCounters: [String: UInt64]?

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
        engineCounters: TimerEngine.Counters? = nil
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
        self.violations = Dictionary(
            uniqueKeysWithValues: StressInvariant.allCases.map { ($0.rawValue, violations[$0] ?? 0) })
        self.violationsTotal = violations.values.reduce(0, +)
        self.engineCounters = engineCounters.map { counters in
            [
                "wakeups": counters.wakeups, "fired": counters.fired, "late": counters.late,
                "missed_periods": counters.missedPeriods, "armed": counters.armed, "coalesced": counters.coalesced,
                "clock_steps": counters.clockSteps,
            ]
        }
    }

    /// The sum of `results` (their shared `seconds`), as the `all` row.
    public static func total(_ results: [StressResult], seconds: Double) -> StressResult {
        var operations: [String: Int] = [:]
        var violations: [StressInvariant: Int] = [:]
        for result in results {
            operations.merge(result.operationsByKind.map { ("\(result.backend).\($0.key)", $0.value) }) { $0 + $1 }
            for (key, count) in result.violations { violations[StressInvariant(rawValue: key)!, default: 0] += count }
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
