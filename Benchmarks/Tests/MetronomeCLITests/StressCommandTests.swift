import Foundation
import Glibc
import MetronomeTestSupport
import Testing

/// `metronome stress` run as a process, its JSON decoded: the real tool, every backend.
///
/// The short run is part of every `swift test`; the 60-second one runs with `STRESS` set
/// (`make stress`, or `STRESS=1 swift test --filter MetronomeStressTests`).
@Suite(.serialized)
struct StressCommandTests {
    /// The part of `metronome stress --json` the tests read.
    struct Output: Decodable {
        struct Row: Decodable {
            var backend: String
            var operations: Int
            var handlerEntries: Int
            var violationsTotal: Int
            var violations: [String: Int]

            enum CodingKeys: String, CodingKey {
                case backend, operations, violations
                case handlerEntries = "handler_entries"
                case violationsTotal = "violations_total"
            }
        }

        var tool: String
        var command: String
        var results: [Row]
        var notes: [String]
    }

    @Test(.timeLimit(.minutes(2)))
    func shortRunOnEveryBackendHasNoViolations() throws {
        try self.expectClean(seconds: 5, threads: 4, load: 2)
    }

    @Test(.enabled(if: ProcessInfo.processInfo.environment["STRESS"] != nil), .timeLimit(.minutes(3)))
    func longRunOnEveryBackendHasNoViolations() throws {
        try self.expectClean(seconds: 60, threads: 8, load: 4)
    }

    private func expectClean(seconds: Int, threads: Int, load: Int) throws {
        let executable = try ChildProcess.product("metronome").get()
        let run = try ChildProcess.run(
            executable,
            ["stress", "--duration", "\(seconds)", "--threads", "\(threads)", "--load", "\(load)", "--json"],
            timeout: Double(seconds) + 60
        )
        let output = try JSONDecoder().decode(Output.self, from: Data(run.stdout.utf8))
        let json = try JSONSerialization.jsonObject(with: Data(run.stdout.utf8))
        let schemaViolations = JSONSchemaCheck.violations(of: json, against: try JSONSchemaCheck.schema(for: "stress"))
        #expect(schemaViolations.isEmpty, "\(schemaViolations)")
        #expect(output.tool == "metronome" && output.command == "stress")
        #expect(
            Set(output.results.map(\.backend)) == [
                "engine", "sharded-engine", "dispatch", "scheduler", "expiring-value", "lifecycle", "edges", "all",
            ])
        let violations = output.notes.filter { $0.hasPrefix("violation:") }
        for row in output.results {
            // Every subject really ran and fired.
            #expect(row.operations > 0, "\(row.backend) ran no operations")
            #expect(row.handlerEntries > 0, "\(row.backend) ran no handlers")
            let broken = row.violations.filter { $0.value > 0 }
            #expect(row.violationsTotal == 0, "\(row.backend): \(broken); \(violations.prefix(6))")
        }
        #expect(run.status == (output.results.last?.violationsTotal == 0 ? 0 : 1), "stderr: \(run.stderr.suffix(2000))")
    }
}
