import Foundation
import Testing

@testable import MetronomeMeasurements

@Suite struct ReportTests {
    private let machine = MachineFacts(
        kernelRelease: "6.1.0",
        cpuCount: 2,
        cpufreqGovernor: "unknown",
        timerSlackNanoseconds: 50_000,
        clocksource: "tsc",
        schedFIFOPermitted: false,
        schedFIFOReason: "EPERM",
        schedRTRuntimeMicroseconds: 950_000
    )

    // Whole seconds: the JSON keeps milliseconds, so the report round-trips exactly.
    private let invocation = Invocation(
        toolVersion: "9.9.9",
        commandLine: ["metronome", "jitter", "--json"],
        startedAt: Date(timeIntervalSince1970: 1_750_000_000),
        endedAt: Date(timeIntervalSince1970: 1_750_000_025)
    )

    private let latency = LatencySummary(
        samples: 1_000,
        minNanoseconds: 1_500,
        p50Nanoseconds: 8_250,
        p90Nanoseconds: 9_000,
        p99Nanoseconds: 20_125,
        p999Nanoseconds: 41_000,
        maxNanoseconds: 120_400,
        missed: 3,
        early: 0,
        meanNanoseconds: 9_012,
        standardDeviationNanoseconds: 4_000.25
    )

    /// A jitter report with no results: what every report has, and nothing more.
    private var emptyJitterReport: Report<JitterConfiguration, JitterResult> {
        Report(
            command: "jitter", invocation: self.invocation, config: JitterConfiguration(), machine: self.machine,
            results: [])
    }

    private func object(_ json: String) throws -> [String: Any] {
        try #require(JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
    }

    @Test func jitterReportHasTheStableKeysAndRoundTrips() throws {
        let result = JitterResult(
            backend: "engine", latency: latency, wakeupsPerSecond: 1000.04, cpuMillisecondsPer1k: 9.12345,
            note: "engine: a remark")
        let report = Report(
            command: "jitter",
            invocation: invocation,
            config: JitterConfiguration(),
            machine: machine,
            results: [result],
            notes: ["a note"]
        )
        let json = try report.jsonString()

        let top = try object(json)
        #expect(
            Set(top.keys) == [
                "schema_version", "tool", "tool_version", "command", "command_line", "started_at", "ended_at",
                "config", "machine", "results", "notes",
            ])
        #expect(top["schema_version"] as? Int == 1)
        #expect(top["tool_version"] as? String == "9.9.9")
        #expect(top["command_line"] as? [String] == ["metronome", "jitter", "--json"])
        #expect(top["started_at"] as? String == "2025-06-15T15:06:40.000Z")
        #expect(top["ended_at"] as? String == "2025-06-15T15:07:05.000Z")
        #expect(top["tool"] as? String == "metronome")
        #expect(top["command"] as? String == "jitter")
        #expect(top["notes"] as? [String] == ["a note"])
        let config = try #require(top["config"] as? [String: Any])
        #expect(
            Set(config.keys) == ["interval_ns", "samples", "timers", "leeway_ns", "handler_work_ns", "warmup", "clock"])
        let machineKeys = try #require(top["machine"] as? [String: Any]).keys
        #expect(
            Set(machineKeys) == [
                "kernel", "cpus", "governor", "timer_slack_ns", "clocksource", "sched_fifo_permitted",
                "sched_fifo_reason", "sched_rt_runtime_us",
            ]
        )
        let row = try #require((top["results"] as? [[String: Any]])?.first)
        #expect(
            Set(row.keys) == [
                "backend", "samples", "min_us", "mean_us", "stddev_us", "p50_us", "p90_us", "p99_us", "p999_us",
                "max_us", "missed", "early",
                "wakeups_per_s", "cpu_ms_per_1k",
            ]
        )
        #expect(row["backend"] as? String == "engine")
        #expect(row["p50_us"] as? Double == 8.25)
        #expect(row["mean_us"] as? Double == 9.012)
        #expect(row["stddev_us"] as? Double == 4)
        #expect(row["p99_us"] as? Double == 20.125)
        #expect(row["wakeups_per_s"] as? Double == 1000.0)
        #expect(row["cpu_ms_per_1k"] as? Double == 9.123)

        let decoded = try JSONDecoder().decode(Report<JitterConfiguration, JitterResult>.self, from: Data(json.utf8))
        var expected = report
        expected.results[0].note = nil
        #expect(decoded == expected)
    }

    @Test func measuringThreadsAreRowsOfTheirOwnWithANullForAnUnpinnedCPU() throws {
        let threads = [
            JitterThreadResult(thread: 0, cpu: 1, samples: 500, maxMicroseconds: 120.4),
            JitterThreadResult(thread: 1, cpu: nil, samples: 500, maxMicroseconds: 80),
        ]
        let result = JitterResult(
            backend: "timerfd", latency: latency, wakeupsPerSecond: 1000, cpuMillisecondsPer1k: 9, threads: threads)
        let json = String(decoding: try JSONEncoder().encode(result), as: UTF8.self)
        let row = try object(json)
        let rows = try #require(row["threads"] as? [[String: Any]])
        #expect(
            rows.map { Set($0.keys) } == [
                ["thread", "cpu", "samples", "max_us"], ["thread", "cpu", "samples", "max_us"],
            ])
        #expect(rows[0]["cpu"] as? Int == 1)
        #expect(rows[1]["cpu"] is NSNull)
        #expect(rows[0]["max_us"] as? Double == 120.4)
        #expect(try JSONDecoder().decode(JitterResult.self, from: Data(json.utf8)).threads == threads)
    }

    @Test func jsonIsPrettyPrintedWithSortedKeys() throws {
        let report = self.emptyJitterReport
        let json = try report.jsonString()
        #expect(json.contains("\n  \"command\" : \"jitter\""))
        let command = try #require(json.range(of: "\"command\""))
        let tool = try #require(json.range(of: "\"tool\""))
        #expect(command.lowerBound < tool.lowerBound)
    }

    @Test func coalesceResultAddsItsKeys() throws {
        let result = CoalesceResult(
            backend: "gcd", latency: latency, inWindow: 990, late: 10, wakeups: 400, optimumWakeups: 38,
            wakeupsPerSecond: 190.5, cpuMillisecondsPer1k: 2)
        let report = Report(
            command: "coalesce", invocation: invocation, config: CoalesceConfiguration(), machine: machine,
            results: [result])
        let json = try report.jsonString()
        let top = try object(json)
        let config = try #require(top["config"] as? [String: Any])
        #expect(Set(config.keys) == ["timers", "window_ns", "leeway_ns", "seed"])
        let row = try #require((top["results"] as? [[String: Any]])?.first)
        #expect(
            Set(row.keys) == [
                "backend", "samples", "min_us", "mean_us", "stddev_us", "p50_us", "p90_us", "p99_us", "p999_us",
                "max_us", "missed", "early",
                "wakeups_per_s", "cpu_ms_per_1k", "wakeups", "optimum_wakeups", "in_window", "late",
            ]
        )
        #expect(row["wakeups"] as? Int == 400)
        #expect(row["optimum_wakeups"] as? Int == 38)
        #expect(row["in_window"] as? Int == 990)
        #expect(row["late"] as? Int == 10)
        let decoded = try JSONDecoder().decode(
            Report<CoalesceConfiguration, CoalesceResult>.self,
            from: Data(json.utf8)
        )
        #expect(decoded == report)
    }

    @Test func notesMayBeAbsentWhenDecoding() throws {
        let report = self.emptyJitterReport
        var top = try object(try report.jsonString())
        top["notes"] = nil
        let data = try JSONSerialization.data(withJSONObject: top)
        let decoded = try JSONDecoder().decode(Report<JitterConfiguration, JitterResult>.self, from: data)
        #expect(decoded.notes.isEmpty)
        #expect(decoded.command == "jitter")
    }
}
