import Foundation
import MetronomeTestSupport
import Testing

/// Runs each `metronome` subcommand briefly with `--json` and checks the output against its
/// JSON Schema (`Benchmarks/Schemas/`), plus the behaviour every row must show (nothing
/// early, nothing lost).
@Suite(.serialized)
struct CLISmokeTests {
    static let latencyKeys: Set<String> = [
        "backend", "samples", "min_us", "mean_us", "stddev_us", "p50_us", "p90_us", "p99_us", "p999_us", "max_us",
        "missed", "early",
        "wakeups_per_s", "cpu_ms_per_1k",
    ]

    /// Runs `metronome` with `arguments` and returns its JSON report, checking the envelope.
    private func report(_ arguments: [String], command: String) throws -> [[String: Any]] {
        try self.envelope(arguments, command: command).results
    }

    /// A whole report: its rows, its config and its notes.
    private typealias Envelope = (results: [[String: Any]], config: [String: Any], notes: [String])

    /// The whole report, not only its rows.
    private func envelope(_ arguments: [String], command: String) throws -> Envelope {
        let executable = try ChildProcess.product("metronome").get()
        let run = try ChildProcess.run(executable, arguments + ["--json"], timeout: 240)
        #expect(run.status == 0, "stderr: \(run.stderr.suffix(2000))")
        let top = try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any])
        let violations = JSONSchemaCheck.violations(of: top, against: try JSONSchemaCheck.schema(for: command))
        #expect(violations.isEmpty, "\(violations)")
        #expect(top["command_line"] as? [String] == [executable.path] + arguments + ["--json"])
        return (
            try #require(top["results"] as? [[String: Any]]), try #require(top["config"] as? [String: Any]),
            try #require(top["notes"] as? [String])
        )
    }

    @Test(.timeLimit(.minutes(5)))
    func jitterOnBoottimeSkipsTheBackendsThatOnlyKnowTheMonotonicClock() throws {
        let report = try self.envelope(
            ["jitter", "--clock", "boottime", "--samples", "50", "--rounds", "1", "--backends", "engine,gcd,timerfd"],
            command: "jitter")
        #expect(report.results.map { $0["backend"] as? String } == ["engine", "timerfd"])
        #expect(report.config["clock"] as? String == "boottime")
        #expect(report.notes.contains("gcd skipped: it measures on CLOCK_MONOTONIC only"))
        #expect(report.notes.contains { $0.contains("on CLOCK_BOOTTIME") })
        for row in report.results { #expect(row["early"] as? Int == 0, "\(row)") }
    }

    @Test(.timeLimit(.minutes(5)))
    func jitterRecordsThePolicyAndThePriorityItRanWith() throws {
        let report = try self.envelope(
            [
                "jitter", "--policy", "other", "--priority", "70", "--samples", "50", "--rounds", "1", "--backends",
                "engine-rt",
            ],
            command: "jitter")
        #expect(report.config["policy"] as? String == "other")
        #expect(report.config["priority"] as? Int == 0)
        #expect(report.results.map { $0["backend"] as? String } == ["engine-rt"])
    }

    @Test(.timeLimit(.minutes(5)))
    func jitterReportsEveryBackendWithTheStableKeys() throws {
        let backends = [
            "engine", "engine-spin", "gcd", "gcd-safe", "nio", "timerfd", "sleep-engine", "sleep-continuous",
        ]
        let rows = try self.report(
            ["jitter", "--samples", "200", "--rounds", "2", "--backends", backends.joined(separator: ",")],
            command: "jitter")
        #expect(rows.map { $0["backend"] as? String } == backends)
        for row in rows {
            #expect(Set(row.keys) == Self.latencyKeys.union(["rounds"]))
            #expect(row["samples"] as? Int == 200)
            let rounds = try #require(row["rounds"] as? [[String: Any]])
            #expect(rounds.compactMap { $0["samples"] as? Int } == [100, 100], "each round's own samples")
            #expect(row["early"] as? Int == 0, "\(row)")
        }
    }

    @Test(.timeLimit(.minutes(5)))
    func jitterOnAThreadPerCPUReportsEachThreadsWorstCase() throws {
        let report = try self.envelope(
            [
                "jitter", "--smp", "--samples", "100", "--rounds", "2", "--backends",
                "engine,gcd,timerfd,sleep-engine,sleep-continuous",
            ], command: "jitter")
        let affinity = try #require(report.config["affinity"] as? [Int])
        #expect(!affinity.isEmpty)
        #expect(report.config["threads"] as? Int == affinity.count)
        #expect(report.config["smp"] as? Bool == true)
        for row in report.results {
            let threads = try #require(row["threads"] as? [[String: Any]], "\(row)")
            #expect(threads.map { $0["thread"] as? Int } == Array(affinity.indices))
            // GCD cannot be pinned: its threads say so instead of claiming a CPU.
            let expectedCPUs: [Int?] = row["backend"] as? String == "gcd" ? affinity.map { _ in nil } : affinity
            #expect(threads.map { $0["cpu"] as? Int } == expectedCPUs, "\(row)")
            #expect(threads.allSatisfy { $0["samples"] as? Int == 100 }, "\(row)")
            #expect(row["samples"] as? Int == 100 * affinity.count)
            #expect(row["max_us"] as? Double == threads.compactMap { $0["max_us"] as? Double }.max())
            #expect(row["early"] as? Int == 0, "\(row)")
        }
        #expect(report.notes.contains { $0.hasPrefix("gcd: libdispatch") })
        #expect(report.notes.contains { $0.hasPrefix("timerfd max per thread: T0 (CPU \(affinity[0])) ") })
    }

    /// Whether rt-tests' cyclictest is on `PATH`, as `--with-cyclictest` looks for it.
    static var cyclictestInstalled: Bool {
        (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").contains {
            FileManager.default.isExecutableFile(atPath: "\($0)/cyclictest")
        }
    }

    @Test(.timeLimit(.minutes(5)), .enabled(if: Self.cyclictestInstalled))
    func cyclictestRunsTheSameThreadsOnTheSameCPUs() throws {
        let report = try self.envelope(
            [
                "jitter", "--smp", "--policy", "other", "--samples", "100", "--rounds", "1", "--backends", "timerfd",
                "--with-cyclictest",
            ],
            command: "jitter")
        let affinity = try #require(report.config["affinity"] as? [Int])
        let row = try #require(report.results.first { $0["backend"] as? String == "cyclictest" })
        let threads = try #require(row["threads"] as? [[String: Any]], "\(row)")
        #expect(threads.map { $0["cpu"] as? Int } == affinity)
        #expect(threads.allSatisfy { $0["samples"] as? Int == 100 }, "\(row)")
        #expect(row["samples"] as? Int == 100 * affinity.count)
    }

    @Test(.timeLimit(.minutes(5)))
    func nsecsPrintsTheTableInNanoseconds() throws {
        let executable = try ChildProcess.product("metronome").get()
        let run = try ChildProcess.run(
            executable,
            ["jitter", "--nsecs", "--threads", "2", "--samples", "50", "--rounds", "1", "--backends", "timerfd"],
            timeout: 240)
        #expect(run.status == 0, "stderr: \(run.stderr.suffix(2000))")
        #expect(run.stdout.contains("p99 ns"))
        #expect(!run.stdout.contains("p99 µs"))
        #expect(run.stdout.contains("note: timerfd max per thread: T0 "))
        #expect(run.stdout.contains(" ns, T1 "))
    }

    @Test(.timeLimit(.minutes(5)))
    func coalesceReportsWakeUpsAgainstTheOptimum() throws {
        let rows = try self.report(
            ["coalesce", "--timers", "300", "--window", "300", "--leeway", "30"], command: "coalesce")
        #expect(rows.map { $0["backend"] as? String } == ["engine", "gcd", "nio"])
        for row in rows {
            #expect(Set(row.keys) == Self.latencyKeys.union(["wakeups", "optimum_wakeups", "in_window", "late"]))
            #expect(row["samples"] as? Int == 300)
            #expect(row["early"] as? Int == 0, "\(row)")
            let inWindow = try #require(row["in_window"] as? Int)
            let late = try #require(row["late"] as? Int)
            #expect(inWindow + late == 300)
            #expect((row["optimum_wakeups"] as? Int ?? 0) >= 1)
        }
    }

    @Test(.timeLimit(.minutes(5)))
    func scaleFiresEveryTimerInOrderAndNoneEarly() throws {
        let report = try self.envelope(
            [
                "scale", "--timers", "20000", "--gcd-timers", "2000", "--operations", "20000", "--armed", "100,1000",
                "--armed-operations", "2000",
            ], command: "scale")
        let rows = report.results.filter { $0["armed"] == nil }
        #expect(rows.map { $0["backend"] as? String } == ["core", "engine-swift", "gcd"])
        for row in rows {
            #expect(
                Set(row.keys).isSuperset(of: [
                    "add_cancel_per_s", "reschedule_per_s", "reschedule_later_per_s", "bytes_per_timer", "fires_per_s",
                    "out_of_order", "early",
                ]))
            #expect(row["fired"] as? Int == row["timers"] as? Int, "\(row)")
            #expect(row["out_of_order"] as? Int == 0, "\(row)")
            #expect(row["early"] as? Int == 0, "\(row)")
            #expect((row["add_cancel_per_s"] as? Double ?? 0) > 0)
        }
    }

    /// Runs `metronome scale` with the armed-count table's options, and its timers table
    /// small; returns the whole report and the armed-count table's rows.
    private func armedCountTable(
        armed: String, armedOperations: String, timeLimit: String
    ) throws -> (report: Envelope, rows: [[String: Any]]) {
        let report = try self.envelope(
            [
                "scale", "--timers", "1000", "--gcd-timers", "100", "--operations", "1000", "--armed", armed,
                "--armed-operations", armedOperations, "--time-limit", timeLimit,
            ], command: "scale")
        return (report, report.results.filter { $0["armed"] != nil })
    }

    @Test(.timeLimit(.minutes(5)))
    func scaleMeasuresTheEngineNIOAndSleepingTasksAtEachArmedCount() throws {
        let (report, rows) = try self.armedCountTable(armed: "100,1000", armedOperations: "2000", timeLimit: "600")
        #expect(report.config["armed"] as? [Int] == [100, 1000])
        let engine = ["engine-new", "engine-reuse"]
        let nio = ["nio-loop", "nio-thread", "nio-callback"]
        #expect(rows.map { $0["backend"] as? String } == engine + engine + nio + nio + ["task-sleep", "task-sleep"])
        #expect(rows.map { $0["armed"] as? Int } == [100, 100, 1000, 1000, 100, 100, 100, 1000, 1000, 1000, 100, 1000])
        // Each library shows both patterns: a timer made per pair, and one rearmed.
        let perPair = Dictionary(
            rows.map { ($0["backend"] as? String ?? "", $0["per_pair"] as? String ?? "") }, uniquingKeysWith: { $1 })
        #expect(
            perPair == [
                "engine-new": "allocates", "engine-reuse": "reuses", "nio-loop": "allocates",
                "nio-thread": "allocates", "nio-callback": "reuses", "task-sleep": "allocates",
            ])
        for row in rows {
            #expect(row["finished"] as? Bool == true, "\(row)")
            #expect(row["pairs_done"] as? Int == 2000, "\(row)")
            #expect((row["add_cancel_per_s"] as? Double ?? 0) > 0, "\(row)")
        }
        #expect(
            report.notes.contains {
                $0.hasPrefix("nio: cancel removes the task from the loop's heap by a linear search")
            })
    }

    @Test(.timeLimit(.minutes(5)))
    func scaleReportsARunPastItsTimeLimitAsNotFinished() throws {
        // A hundred million pairs cannot be done in a millisecond.
        let (_, rows) = try self.armedCountTable(armed: "1000", armedOperations: "100000000", timeLimit: "0.001")
        #expect(
            rows.map { $0["backend"] as? String } == [
                "engine-new", "engine-reuse", "nio-loop", "nio-thread", "nio-callback", "task-sleep",
            ])
        for row in rows {
            #expect(row["finished"] as? Bool == false, "\(row)")
            #expect(row["add_cancel_per_s"] == nil, "\(row)")
            #expect((row["pairs_done"] as? Int ?? .max) < 100_000_000, "\(row)")
        }
    }

    @Test(.timeLimit(.minutes(5)))
    func scaleSessionsExpiresEachLeftSessionOnceAndNoneEarly() throws {
        let report = try self.envelope(
            ["scale", "--workload", "sessions", "--timers", "20000", "--operations", "20000"], command: "scale")
        #expect(report.config["workload"] as? String == "sessions")
        #expect(report.results.map { $0["backend"] as? String } == ["expiring-value", "gcd-work-item"])
        for row in report.results {
            #expect(row["values"] as? Int == 20000)
            #expect(row["expired_once"] as? Int == row["expiring"] as? Int, "\(row)")
            #expect(row["expired_more_than_once"] as? Int == 0, "\(row)")
            #expect(row["early"] as? Int == 0, "\(row)")
            #expect((row["touches_per_s"] as? Double ?? 0) > 0)
            #expect((row["reads_per_s"] as? Double ?? 0) > 0)
            #expect(row["reads_expired"] as? Int == 0, "\(row)")
        }
    }
}
