import Foundation
import Glibc
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
        let executable = try StressExecutable.url.get()
        let run = try StressExecutable.run(
            executable,
            ["stress", "--duration", "\(seconds)", "--threads", "\(threads)", "--load", "\(load)", "--json"],
            timeout: Double(seconds) + 60
        )
        let output = try JSONDecoder().decode(Output.self, from: Data(run.stdout.utf8))
        #expect(output.tool == "metronome" && output.command == "stress")
        #expect(Set(output.results.map(\.backend)) == ["engine", "dispatch", "scheduler", "all"])
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

/// Finds `metronome` next to the test binary, building it into the same scratch directory
/// (same configuration and sanitizer) if it is missing.
enum StressExecutable {
    static let name = "metronome"

    struct NotFound: Error, CustomStringConvertible {
        var description: String
    }

    /// Located (or built) once per test process.
    static let url: Result<URL, NotFound> = locate()

    static func locate() -> Result<URL, NotFound> {
        // The products directory: where the test binary lives (.build/<triple>/<config>).
        let me = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        let products = me.deletingLastPathComponent()
        let url = products.appendingPathComponent(Self.name)
        if FileManager.default.isExecutableFile(atPath: url.path) { return .success(url) }

        let configuration = products.lastPathComponent  // debug or release
        let scratch = products.deletingLastPathComponent().deletingLastPathComponent()
        let package = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        var arguments = [
            "swift", "build", "--product", Self.name, "--package-path", package.path,
            "--scratch-path", scratch.path, "--configuration", configuration,
        ]
        if dlsym(dlopen(nil, RTLD_NOW), "__tsan_init") != nil { arguments.append("--sanitize=thread") }
        if dlsym(dlopen(nil, RTLD_NOW), "__asan_init") != nil { arguments.append("--sanitize=address") }
        let build = Process()
        build.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        build.arguments = arguments
        do {
            try build.run()
            build.waitUntilExit()
        } catch {
            return .failure(NotFound(description: "could not run \(arguments.joined(separator: " ")): \(error)"))
        }
        guard build.terminationStatus == 0, FileManager.default.isExecutableFile(atPath: url.path) else {
            return .failure(
                NotFound(description: "\(Self.name) not found next to \(me.path), and `\(arguments.joined(separator: " "))` failed")
            )
        }
        return .success(url)
    }

    struct Outcome {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    /// Runs `executable` to completion, killing it after `timeout` seconds.
    static func run(_ executable: URL, _ arguments: [String], timeout: Double) throws -> Outcome {
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        let stdout = Pipe()
        let stderr = Pipe()
        process.standardOutput = stdout
        process.standardError = stderr
        try process.run()
        let pid = process.processIdentifier
        let watchdog = DispatchWorkItem { kill(pid, SIGKILL) }
        DispatchQueue.global().asyncAfter(deadline: .now() + timeout, execute: watchdog)
        // Drain stderr concurrently: a sanitizer report can outgrow the pipe's buffer.
        let errors = LockedText()
        let reader = Thread { errors.set(String(decoding: stderr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)) }
        reader.start()
        let out = stdout.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        watchdog.cancel()
        while !errors.isSet { usleep(1000) }
        return Outcome(status: process.terminationStatus, stdout: String(decoding: out, as: UTF8.self), stderr: errors.value)
    }

    private final class LockedText: @unchecked Sendable {
        private let lock = NSLock()
        private var text: String?

        func set(_ text: String) {
            self.lock.withLock { self.text = text }
        }

        var isSet: Bool { self.lock.withLock { self.text != nil } }
        var value: String { self.lock.withLock { self.text ?? "" } }
    }
}
