import Testing

@testable import MetronomeMeasurements

@Suite struct ResultTableTests {
    private func latency(p50: Int64, p99: Int64) -> LatencySummary {
        LatencySummary(
            samples: 10_000,
            minNanoseconds: 1_000,
            p50Nanoseconds: p50,
            p90Nanoseconds: p50,
            p99Nanoseconds: p99,
            p999Nanoseconds: p99,
            maxNanoseconds: 250_000,
            missed: 1,
            early: 0
        )
    }

    private func lines(_ table: String) -> [Substring] {
        table.split(separator: "\n")
    }

    @Test func jitterTableComparesWithGCD() {
        let table = ResultTable.jitter([
            JitterResult(
                backend: "engine",
                latency: latency(p50: 5_000, p99: 30_000),
                wakeupsPerSecond: 1000,
                cpuMillisecondsPer1k: 9
            ),
            JitterResult(
                backend: "gcd",
                latency: latency(p50: 10_000, p99: 120_000),
                wakeupsPerSecond: 2000,
                cpuMillisecondsPer1k: 31
            ),
        ])
        let rows = lines(table)
        #expect(rows.count == 3)
        #expect(rows[0].hasPrefix("backend"))
        #expect(rows[0].contains("avg µs  stddev µs"))
        #expect(rows[0].hasSuffix("p50×gcd  p99×gcd"))
        #expect(rows[1].hasPrefix("engine"))
        #expect(rows[1].hasSuffix("0.50×    0.25×"))
        #expect(rows[2].hasSuffix("1.00×    1.00×"))
        #expect(rows[1].contains(" 5.00 "))
        #expect(rows[2].contains(" 120.0 "))
        #expect(Set(rows.map(\.count)).count == 1, "columns are not aligned:\n\(table)")
    }

    @Test func jitterTableInNanosecondsPrintsWholeNanoseconds() {
        let result = JitterResult(
            backend: "engine", latency: latency(p50: 5_123, p99: 30_000), wakeupsPerSecond: 1000,
            cpuMillisecondsPer1k: 9)
        let rows = lines(ResultTable.jitter([result], unit: .nanoseconds))
        #expect(rows[0].contains("p50 ns"))
        #expect(!rows[0].contains("µs"))
        #expect(rows[1].contains(" 5123 "))
        #expect(rows[1].contains(" 250000 "))
        // Only latencies change unit: CPU ms/1k stays as it is.
        #expect(rows[1].hasSuffix(" 9.00"))
    }

    @Test func jitterTableWithoutGCDHasNoRatios() {
        let table = ResultTable.jitter([
            JitterResult(
                backend: "timerfd",
                latency: latency(p50: 5_000, p99: 30_000),
                wakeupsPerSecond: 1000,
                cpuMillisecondsPer1k: 9
            )
        ])
        #expect(!table.contains("×gcd"))
        #expect(lines(table).count == 2)
    }

    @Test func coalesceTableShowsTheOptimum() {
        let table = ResultTable.coalesce([
            CoalesceResult(
                backend: "gcd",
                latency: latency(p50: 5_000, p99: 30_000),
                inWindow: 9_990,
                late: 10,
                wakeups: 380,
                optimumWakeups: 38,
                wakeupsPerSecond: 190,
                cpuMillisecondsPer1k: 2
            )
        ])
        let rows = lines(table)
        #expect(rows.count == 2)
        #expect(rows[0].contains("×optimum"))
        #expect(rows[1].contains("10.00×"))
        #expect(rows[1].contains(" 9990 "))
        #expect(rows[0].count == rows[1].count)
    }
}
