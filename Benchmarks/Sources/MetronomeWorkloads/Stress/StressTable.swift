import Foundation
import MetronomeMeasurements

/// The tables `metronome stress` prints.
public enum StressTable {
    /// Throughput and activity, one row per subject and the total.
    public static func summary(_ results: [StressResult]) -> String {
        let header = [
            "backend", "operations", "ops/s", "handlers", "one-shots", "ticks", "missed", "self-ops", "gated",
            "violations",
        ]
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
    public static func violations(_ results: [StressResult]) -> String {
        let header = ["invariant"] + results.map(\.backend)
        let rows = StressInvariant.allCases.map { invariant in
            [invariant.summary] + results.map { "\($0.violations[invariant.rawValue] ?? 0)" }
        }
        return ResultTable.render(header: header, rows: rows)
    }
}
