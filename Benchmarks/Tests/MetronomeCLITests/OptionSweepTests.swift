import Foundation
import MetronomeTestSupport
import Testing

/// Every value option of every subcommand, given values that trapped or hung the tool
/// before: each run ends with a clean exit, never a signal. A refused value exits 64 and
/// names the option; an accepted one runs the (small) measurement to the end.
@Suite(.serialized)
struct OptionSweepTests {
    static let hostileValues = ["0", "-1", "1e-9", "nan", "inf", "1e300", "9223372036854775807", "garbage"]

    /// Settings small enough that a run the swept value leaves valid finishes in a second.
    static let quickArguments: [String: [String]] = [
        "jitter": ["--samples", "20", "--rounds", "1", "--backends", "timerfd", "--interval", "100"],
        "coalesce": ["--timers", "20", "--window", "5", "--leeway", "1"],
        "scale": [
            "--timers", "1000", "--gcd-timers", "100", "--operations", "1000", "--fire-window", "1",
            "--armed", "100", "--armed-operations", "100", "--time-limit", "1",
        ],
        "stress": ["--duration", "0.3", "--threads", "1", "--timers", "4", "--load", "0"],
    ]

    /// The long names of every option that takes a value, per subcommand, from the tool's
    /// own description of its interface, so a new option is swept without editing this test.
    private func valueOptions() throws -> [(subcommand: String, option: String)] {
        let executable = try ChildProcess.product("metronome").get()
        let dump = try ChildProcess.run(executable, ["--experimental-dump-help"], timeout: 60)
        let top = try #require(try JSONSerialization.jsonObject(with: Data(dump.stdout.utf8)) as? [String: Any])
        let command = try #require(top["command"] as? [String: Any])
        let subcommands = try #require(command["subcommands"] as? [[String: Any]])
        var options: [(String, String)] = []
        for subcommand in subcommands {
            let name = try #require(subcommand["commandName"] as? String)
            guard Self.quickArguments[name] != nil else { continue }  // help
            for argument in subcommand["arguments"] as? [[String: Any]] ?? []
            where argument["kind"] as? String == "option" {
                let names = argument["names"] as? [[String: Any]] ?? []
                if let long = names.first(where: { $0["kind"] as? String == "long" })?["name"] as? String {
                    options.append((name, long))
                }
            }
        }
        return options
    }

    @Test(.timeLimit(.minutes(10)))
    func hostileValuesEndInACleanExitNeverASignal() throws {
        let executable = try ChildProcess.product("metronome").get()
        let options = try self.valueOptions()
        #expect(Set(options.map(\.subcommand)) == Set(Self.quickArguments.keys))
        // --hgrm takes any name as a directory: keep what it creates out of the source tree.
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("metronome-sweep-\(getpid())")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        for (subcommand, option) in options {
            for value in Self.hostileValues {
                let arguments = [subcommand] + Self.quickArguments[subcommand]! + ["--\(option)", value, "--json"]
                let run = try ChildProcess.run(executable, arguments, timeout: 120, currentDirectory: scratch)
                let shown = arguments.joined(separator: " ")
                #expect(run.reason == .exit, "\(shown): killed by signal \(run.status)")
                // A stress run exits 1 on a violation, which its JSON's notes name.
                let violations = run.stdout.split(separator: "\"").filter { $0.hasPrefix("violation:") }
                #expect(
                    run.status == 0 || run.status == 64,
                    "\(shown): exit \(run.status); \(run.stderr.suffix(500)) \(violations.prefix(5))")
                if run.status == 64 {
                    #expect(
                        run.stderr.contains("--\(option)"),
                        "\(shown): the error does not name the option: \(run.stderr)")
                    #expect(run.stderr.contains("Usage: metronome \(subcommand)"), "\(shown): no usage: \(run.stderr)")
                }
            }
        }
    }

    /// Thread options that are valid one by one but cannot run together, or name CPUs this
    /// process cannot use: refused before measuring, naming the option.
    @Test(arguments: [
        (["--threads", "3", "--affinity", "0"], "--affinity"),
        (["--smp", "--threads", "1"], "--smp"),
        (["--smp", "--affinity", "0"], "--smp"),
        (["--affinity", "0,0"], "--affinity"),
        (["--affinity", "1023"], "--affinity"),
        (["--affinity", "1024"], "--affinity"),
        (["--affinity", "1-0"], "--affinity"),
        (["--threads", "100000"], "--threads"),
        (["--threads", "2", "--timers", "60000"], "--threads"),
        // One thread per CPU named, or per CPU with --smp: two here, on two CPUs (on one,
        // CPU 1 is refused instead).
        (["--affinity", "0,1", "--timers", "60000"], "--affinity"),
    ])
    func threadOptionsThatCannotRunAreRefused(options: [String], named option: String) throws {
        let executable = try ChildProcess.product("metronome").get()
        let arguments = ["jitter"] + Self.quickArguments["jitter"]! + options + ["--json"]
        let run = try ChildProcess.run(executable, arguments, timeout: 60)
        #expect(run.reason == .exit)
        #expect(run.status == 64, "\(arguments): exit \(run.status)")
        #expect(run.stderr.contains(option), "\(arguments): \(run.stderr)")
        #expect(run.stdout.isEmpty)
    }

    @Test(.enabled(if: ProcessInfo.processInfo.activeProcessorCount >= 2))
    func smpCountsATimerSetPerCPU() throws {
        try self.threadOptionsThatCannotRunAreRefused(options: ["--smp", "--timers", "60000"], named: "--smp")
    }

    /// Values each option's range allows but the run could not use: refused before
    /// measuring, as a usage error of the subcommand that names the option, not as a
    /// failed run (exit 1) after its other backends were measured, nor as an empty table.
    @Test(arguments: [
        (["jitter", "--backends", "engine-spin", "--spin", "1001"], "--spin"),
        (["jitter", "--backends", "timerfd", "--hgrm", "/dev/null"], "--hgrm"),
        (["coalesce", "--timers", "20", "--hgrm", "/dev/null/histograms"], "--hgrm"),
        (["jitter", "--backends", "gcd,sleep-engine", "--clock", "wall"], "--clock"),
    ])
    func valuesTheRunCannotUseAreUsageErrors(arguments: [String], named option: String) throws {
        let executable = try ChildProcess.product("metronome").get()
        let run = try ChildProcess.run(executable, arguments + ["--json"], timeout: 60)
        #expect(run.reason == .exit)
        #expect(run.status == 64, "\(arguments): exit \(run.status): \(run.stderr)")
        #expect(run.stderr.contains(option), "\(arguments): \(run.stderr)")
        #expect(run.stderr.contains("Usage: metronome \(arguments[0])"), "\(arguments): \(run.stderr)")
        #expect(run.stdout.isEmpty)
    }

    /// The parser's time grows with the square of the argument count: thousands of them
    /// are refused at once rather than parsed for seconds.
    @Test func thousandsOfArgumentsAreRefusedAtOnce() throws {
        let executable = try ChildProcess.product("metronome").get()
        let run = try ChildProcess.run(executable, ["jitter"] + Array(repeating: "--json", count: 4_000), timeout: 5)
        #expect(run.reason == .exit)
        #expect(run.status == 64)
        #expect(run.stderr.contains("at most 512 arguments"), "\(run.stderr)")
    }

    /// A leeway longer than the whole run: the last firing may come a leeway after its
    /// deadline, and the run waits for it instead of timing out (exit 1).
    @Test(.timeLimit(.minutes(2)))
    func aLeewayLongerThanTheRunStillCompletes() throws {
        let executable = try ChildProcess.product("metronome").get()
        let arguments = [
            "jitter", "--backends", "sleep-engine", "--leeway", "6000000", "--samples", "2", "--rounds", "1",
            "--interval", "100", "--json",
        ]
        let run = try ChildProcess.run(executable, arguments, timeout: 90)
        #expect(run.reason == .exit)
        #expect(run.status == 0, "exit \(run.status): \(run.stderr)")
    }

    @Test func withoutASubcommandItPrintsHelpAndMeasuresNothing() throws {
        let executable = try ChildProcess.product("metronome").get()
        let run = try ChildProcess.run(executable, [], timeout: 30)
        #expect(run.status == 0)
        #expect(run.stdout.contains("SUBCOMMANDS:"))
        #expect(!run.stdout.contains("backend"))
    }

    @Test func versionIsTheOneReportsCarry() throws {
        let executable = try ChildProcess.product("metronome").get()
        let version = try ChildProcess.run(executable, ["--version"], timeout: 30)
        #expect(version.status == 0)
        let report = try ChildProcess.run(
            executable, ["coalesce", "--timers", "10", "--window", "5", "--leeway", "1", "--json"], timeout: 60)
        let top = try #require(try JSONSerialization.jsonObject(with: Data(report.stdout.utf8)) as? [String: Any])
        #expect(top["tool_version"] as? String == version.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(!version.stdout.isEmpty)
    }
}
