@preconcurrency import Dispatch
import Foundation
import Glibc
import Testing

/// The literature's four DispatchSourceTimer crash patterns, each in a process of its own
/// (`metronome-crash-patterns`, Tests/CrashPatterns/main.swift): on a raw
/// `DispatchSourceTimer` the process dies from a signal, through `SafeDispatchTimer` on
/// either backend it exits 0 in the expected state.
///
/// What libdispatch on this toolchain (Swift 6.3.1, Linux x86_64) really does, observed with
/// the `step=` lines the executable prints before each call:
/// - double-suspend-release, release-while-suspended and cancel-while-suspended die at the
///   *release* with SIGILL in `_dispatch_queue_xref_dispose.cold.1` (libdispatch's "Release of
///   a suspended object"), reached from the Swift wrapper's deinit via `_dispatch_xref_dispose`.
///   `cancel()` on a suspended source does not trap by itself, unlike what the literature says
///   for Darwin ("cancelling a suspended timer crashes immediately"): libdispatch only
///   complains when the suspended source is released, so the pattern includes the release.
/// - resume-after-cancel dies inside `resume()` with SIGILL in `_dispatch_lane_resume.cold.1`
///   ("Over-resume of an object"): the source is active, not suspended, so any extra resume
///   over-resumes, cancelled or not.
@Suite
struct CrashPatternTests {
    enum Pattern: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case doubleSuspendRelease = "double-suspend-release"
        case cancelWhileSuspended = "cancel-while-suspended"
        case releaseWhileSuspended = "release-while-suspended"
        case resumeAfterCancel = "resume-after-cancel"

        var testDescription: String { self.rawValue }

        /// The call a raw source dies in (the last `step=` line printed).
        var rawFatalStep: String {
            switch self {
            case .doubleSuspendRelease, .cancelWhileSuspended, .releaseWhileSuspended: "release"
            case .resumeAfterCancel: "resume"
            }
        }

        /// What `SafeDispatchTimer` answers to each call of the pattern, and its state after.
        var safeCalls: String {
            switch self {
            case .doubleSuspendRelease: "schedule:true suspend:true suspend:false resume:true"
            case .cancelWhileSuspended: "schedule:true suspend:true cancel:true"
            case .releaseWhileSuspended: "schedule:true suspend:true"
            case .resumeAfterCancel: "schedule:true cancel:true resume:false"
            }
        }

        var safeState: String {
            switch self {
            case .doubleSuspendRelease: "running"
            case .cancelWhileSuspended, .resumeAfterCancel: "cancelled"
            case .releaseWhileSuspended: "suspended"
            }
        }
    }

    enum Subject: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case raw, engine, dispatch
        var testDescription: String { self.rawValue }
    }

    struct Outcome {
        var reason: Process.TerminationReason
        var status: Int32
        var stdout: String
        var stderr: String

        var lines: [String] { self.stdout.split(separator: "\n").map(String.init) }
        var lastStep: String? {
            self.lines.last { $0.hasPrefix("step=") }.map { String($0.dropFirst("step=".count)) }
        }
    }

    @Test(.timeLimit(.minutes(10)), arguments: Pattern.allCases, Subject.allCases)
    func crashPattern(pattern: Pattern, subject: Subject) throws {
        let executable = try CrashPatternExecutable.url.get()
        let outcome = try Self.run(executable, [pattern.rawValue, subject.rawValue])
        let context = "exit \(outcome.reason == .exit ? "status" : "signal") \(outcome.status); stdout: \(outcome.lines); stderr: \(outcome.stderr.prefix(400))"

        switch subject {
        case .raw:
            #expect(outcome.reason == .uncaughtSignal, "the raw pattern did not crash: \(context)")
            #expect(outcome.lastStep == pattern.rawFatalStep, "died elsewhere than expected: \(context)")
            #expect(!outcome.lines.contains("survived"), "\(context)")
        case .engine, .dispatch:
            #expect(outcome.reason == .exit && outcome.status == 0, "SafeDispatchTimer did not survive: \(context)")
            #expect(outcome.lines.contains("calls=\(pattern.safeCalls)"), "\(context)")
            #expect(outcome.lines.contains("state=\(pattern.safeState)"), "\(context)")
            #expect(outcome.lines.last == "survived", "\(context)")
        }
    }

    /// Bad arguments are a usage error, not a crash.
    @Test func badArgumentsAreAUsageError() throws {
        let executable = try CrashPatternExecutable.url.get()
        let outcome = try Self.run(executable, ["no-such-pattern", "raw"])
        #expect(outcome.reason == .exit && outcome.status == 64)
        #expect(outcome.stderr.contains("usage:"))
    }

    /// Runs `executable` to completion (killed after 30 s if it hangs).
    static func run(_ executable: URL, _ arguments: [String]) throws -> Outcome {
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        // The Swift runtime's backtracer adds ~0.1 s to every expected crash; the signal is
        // all the test needs.
        var environment = ProcessInfo.processInfo.environment
        environment["SWIFT_BACKTRACE"] = "enable=no"
        process.environment = environment
        let stdout = Pipe()
        let stderr = Pipe()
        process.standardOutput = stdout
        process.standardError = stderr
        try process.run()
        let pid = process.processIdentifier
        let watchdog = DispatchWorkItem { kill(pid, SIGKILL) }
        DispatchQueue.global().asyncAfter(deadline: .now() + 30, execute: watchdog)
        // Small outputs: reading one pipe to its end cannot block the other.
        let out = stdout.fileHandleForReading.readDataToEndOfFile()
        let err = stderr.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        watchdog.cancel()
        return Outcome(
            reason: process.terminationReason,
            status: process.terminationStatus,
            stdout: String(decoding: out, as: UTF8.self),
            stderr: String(decoding: err, as: UTF8.self)
        )
    }
}

/// Finds `metronome-crash-patterns` next to the test binary, building it into the same
/// scratch directory if it is missing.
enum CrashPatternExecutable {
    static let name = "metronome-crash-patterns"

    struct NotFound: Error, CustomStringConvertible {
        var description: String
    }

    /// Located (or built) once per test process.
    static let url: Result<URL, NotFound> = locate()

    static func locate() -> Result<URL, NotFound> {
        // The products directory: where the test binary lives (.build/<triple>/<config>).
        let me = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        var candidates = [me.deletingLastPathComponent()]
        if let argument = CommandLine.arguments.first {
            candidates.append(URL(fileURLWithPath: argument).resolvingSymlinksInPath().deletingLastPathComponent())
        }
        for directory in candidates {
            let url = directory.appendingPathComponent(Self.name)
            if FileManager.default.isExecutableFile(atPath: url.path) { return .success(url) }
        }

        // Not built yet (the test binary was run on its own, or `swift test --skip-build`):
        // build just that product into the same scratch directory, with the same
        // configuration and sanitizer as this test binary. `swift test` holds the scratch
        // directory's lock while the tests run, so a nested `swift build` would wait for it
        // for ever; the outer build has finished by now, so the lock can be ignored.
        let products = candidates[0]
        let configuration = products.lastPathComponent  // debug or release
        let scratch = products.deletingLastPathComponent().deletingLastPathComponent()
        let package = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        var arguments = [
            "swift", "build", "--product", Self.name, "--package-path", package.path,
            "--scratch-path", scratch.path, "--configuration", configuration, "--ignore-lock",
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
        let url = products.appendingPathComponent(Self.name)
        guard build.terminationStatus == 0, FileManager.default.isExecutableFile(atPath: url.path) else {
            return .failure(
                NotFound(description: "\(Self.name) not found next to \(me.path), and `\(arguments.joined(separator: " "))` failed")
            )
        }
        return .success(url)
    }
}
