import MetronomeMeasurements

/// What `metronome jitter` prints beside its results: a note defining every column, and a
/// second table with each backend's spread across rounds, so that one run tells a ranking
/// that holds in every round from one that the rounds disagree on.
///
/// Each column note reads `<column>, <column> = <definition>`, the columns named exactly as
/// the tables head them (CLISmokeTests checks that every column is defined).
enum JitterTableNotes {
    /// One note per group of columns of the results table, in the table's order.
    ///
    /// - Parameters:
    ///   - unit: The unit the latency columns are printed in.
    ///   - comparedWithGCD: Whether the table has the `×gcd` columns (a `gcd` row ran).
    static func resultColumns(unit: LatencyUnit, comparedWithGCD: Bool) -> [String] {
        let latencies = ["min", "avg", "stddev", "p50", "p90", "p99", "p99.9", "max"]
            .map { "\($0) \(unit.symbol)" }.joined(separator: ", ")
        var notes = [
            "samples = firings recorded per backend after the warm-up, all rounds together",
            "\(latencies) = lateness of those firings (firing time − deadline): smallest, mean, standard deviation, "
                + "percentiles and largest, over all rounds merged",
            "missed = deadlines that passed without a firing of their own, because a firing came more than an "
                + "interval late (each firing carries the count it skipped; they are not samples)",
            "early = firings before their deadline; anything but 0 is a bug in the backend",
            "wake-ups/s = wake-ups per second of run time: the backend's own count where it keeps one (the "
                + "engines' counters, timerfd's reads), otherwise the process's voluntary context switches",
            "CPU ms/1k = CPU milliseconds the process spent per 1000 firings, load threads excluded",
        ]
        if comparedWithGCD {
            notes.append("p50×gcd, p99×gcd = the row's p50 or p99 divided by the gcd row's: below 1 is better than GCD")
        }
        return notes
    }

    /// The columns of ``roundsTable(_:unit:)``.
    static func roundsColumns(unit: LatencyUnit) -> [String] {
        ["backend", "rounds", "p50 \(unit.symbol) range", "p99 \(unit.symbol) range", "p99 place by round"]
    }

    /// One note per group of columns of the rounds table.
    static func roundsColumnNotes(unit: LatencyUnit) -> [String] {
        [
            "rounds = the rounds the backend ran in; each measured its share of the samples alone",
            "p50 \(unit.symbol) range, p99 \(unit.symbol) range = the lowest and the highest of the backend's "
                + "per-round p50 or p99: where two backends' ranges overlap, this run does not rank them",
            "p99 place by round = the backend's place by p99 among the backends in each round, in the order "
                + "the rounds ran, 1 the lowest; one place in every round is a ranking this run can trust",
        ]
    }

    /// Each backend's spread across rounds, or `nil` when no backend ran more than one round.
    static func roundsTable(_ results: [JitterResult], unit: LatencyUnit) -> String? {
        guard results.contains(where: { ($0.rounds?.count ?? 0) > 1 }) else { return nil }
        let places = self.placesByRound(results)
        let rows = results.indices.map { index in
            let result = results[index]
            let rounds = result.rounds ?? []
            return [
                result.backend, "\(rounds.count)",
                self.range(rounds.map(\.p50Microseconds), unit: unit),
                self.range(rounds.map(\.p99Microseconds), unit: unit),
                places[index].map(String.init).joined(separator: " "),
            ]
        }
        return ResultTable.render(header: self.roundsColumns(unit: unit), rows: rows)
    }

    /// In how many rounds the backends kept the p99 order of the results table (all rounds
    /// merged), as a sentence; `nil` for a single backend or round.
    static func rankingNote(_ results: [JitterResult]) -> String? {
        let places = self.placesByRound(results)
        guard results.count > 1, let roundCount = places.first?.count, roundCount > 1 else { return nil }
        let merged = results.map { result in 1 + results.filter { $0.p99Microseconds < result.p99Microseconds }.count }
        let held = (0..<roundCount).filter { round in results.indices.allSatisfy { places[$0][round] == merged[$0] } }
        return held.count == roundCount
            ? "the backends kept the table's p99 order in all \(roundCount) rounds"
            : "the backends kept the table's p99 order in \(held.count) of \(roundCount) rounds: "
                + "rank them on more rounds or samples"
    }

    /// For each result, its place by p99 in each round that every result ran, 1 the lowest;
    /// backends with equal p99 share a place.
    static func placesByRound(_ results: [JitterResult]) -> [[Int]] {
        let roundCount = results.map { $0.rounds?.count ?? 0 }.min() ?? 0
        return results.map { result in
            (0..<roundCount).map { round in
                let own = result.rounds![round].p99Microseconds
                return 1 + results.filter { $0.rounds![round].p99Microseconds < own }.count
            }
        }
    }

    private static func range(_ values: [Double], unit: LatencyUnit) -> String {
        guard let low = values.min(), let high = values.max() else { return "–" }
        return "\(unit.text(low))–\(unit.text(high))"
    }
}
