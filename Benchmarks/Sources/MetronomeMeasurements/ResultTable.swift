/// Renders results as aligned text tables for a terminal.
///
/// Latencies are in microseconds; jitter tables can print nanoseconds instead. In jitter
/// tables, when a row's backend is `"gcd"`, the `p50×gcd` and `p99×gcd` columns give each
/// row's percentile divided by GCD's: below 1 is better than GCD.
///
/// ```
/// backend  samples  min µs  avg µs  stddev µs  p50 µs  p90 µs  p99 µs  p99.9 µs  max µs  missed  early  wake-ups/s  CPU ms/1k  p50×gcd  p99×gcd
/// timerfd    10000    3.10    8.80       2.10    8.41    9.90   20.13     41.50   120.4       0      0       999.6       9.12    0.14×    0.21×
/// gcd        10000   40.20   63.00      12.40   61.30   70.10   95.80    180.2    410.0       0      0      2003.1      31.40    1.00×    1.00×
/// ```
public enum ResultTable {
    /// A table of jitter results, one row each, in order, with latencies in `unit`.
    public static func jitter(_ results: [JitterResult], unit: LatencyUnit = .microseconds) -> String {
        let reference = results.first { $0.backend == "gcd" }
        var header = ["backend", "samples"]
        header += ["min", "avg", "stddev", "p50", "p90", "p99", "p99.9", "max"].map { "\($0) \(unit.symbol)" }
        header += ["missed", "early", "wake-ups/s", "CPU ms/1k"]
        if reference != nil {
            header += ["p50×gcd", "p99×gcd"]
        }
        let rows = results.map { result in
            var row = [result.backend, "\(result.samples)"]
            row += [
                result.minMicroseconds, result.meanMicroseconds, result.standardDeviationMicroseconds,
                result.p50Microseconds, result.p90Microseconds, result.p99Microseconds, result.p999Microseconds,
                result.maxMicroseconds,
            ].map(unit.text)
            row += [
                "\(result.missed)", "\(result.early)",
                NumberText.fixed(result.wakeupsPerSecond, places: 1),
                NumberText.fixed(result.cpuMillisecondsPer1k, places: 2),
            ]
            if let reference {
                row.append(ratio(result.p50Microseconds, reference.p50Microseconds))
                row.append(ratio(result.p99Microseconds, reference.p99Microseconds))
            }
            return row
        }
        return render(header: header, rows: rows)
    }

    /// A table of coalesce results, one row each, in order; `×optimum` is wake-ups divided by
    /// the fewest possible.
    public static func coalesce(_ results: [CoalesceResult]) -> String {
        let header = [
            "backend", "timers", "wake-ups", "optimum", "×optimum", "early", "in window", "late",
            "avg µs", "stddev µs", "p50 µs", "p99 µs", "max µs", "CPU ms/1k",
        ]
        let rows = results.map { result in
            let latency = result.latency
            return [
                result.backend, "\(latency.samples)", "\(result.wakeups)", "\(result.optimumWakeups)",
                ratio(Double(result.wakeups), Double(result.optimumWakeups)),
                "\(latency.early)", "\(result.inWindow)", "\(result.late)",
                NumberText.microseconds(latency.meanMicroseconds),
                NumberText.microseconds(latency.standardDeviationMicroseconds),
                NumberText.microseconds(latency.p50Microseconds), NumberText.microseconds(latency.p99Microseconds),
                NumberText.microseconds(latency.maxMicroseconds),
                NumberText.fixed(latency.cpuMillisecondsPer1k, places: 2),
            ]
        }
        return render(header: header, rows: rows)
    }

    private static func ratio(_ value: Double, _ reference: Double) -> String {
        guard reference > 0 else { return "–" }
        return NumberText.fixed(value / reference, places: 2) + "×"
    }

    /// Pads every column to its widest cell: the first left-aligned, the rest right-aligned.
    /// Every table the CLI prints goes through here.
    public static func render(header: [String], rows: [[String]]) -> String {
        let table = [header] + rows
        let widths = header.indices.map { column in table.map { $0[column].count }.max() ?? 0 }
        let lines = table.map { row in
            row.indices.map { column in
                let padding = String(repeating: " ", count: widths[column] - row[column].count)
                return column == 0 ? row[column] + padding : padding + row[column]
            }.joined(separator: "  ")
        }
        return lines.joined(separator: "\n") + "\n"
    }
}
