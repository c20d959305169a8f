@preconcurrency import Dispatch
import Foundation
import Glibc
import MetronomeTestSupport
import Testing

/// The four common ways a DispatchSourceTimer is crashed, each in a process of its own
/// (`metronome-crash-patterns`, Tests/CrashPatterns/main.swift): on a raw
/// `DispatchSourceTimer` the process dies from a signal, through `SafeDispatchTimer` on
/// either backend it exits 0 in the expected state.
///
/// What libdispatch on this toolchain (Swift 6.3.1, Linux x86_64) really does, observed with
/// the `step=` lines the executable prints before each call:
/// - double-suspend-release, release-while-suspended and cancel-while-suspended die at the
///   *release* with SIGILL in `_dispatch_queue_xref_dispose.cold.1` (libdispatch's "Release of
///   a suspended object"), reached from the Swift wrapper's deinit via `_dispatch_xref_dispose`.
///   `cancel()` on a suspended source does not trap by itself, unlike what is often said
///   of Darwin ("cancelling a suspended timer crashes immediately"): libdispatch only
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

    /// Built once per test process.
    static let executable = ChildProcess.product("metronome-crash-patterns")

    @Test(.timeLimit(.minutes(10)), arguments: Pattern.allCases, Subject.allCases)
    func crashPattern(pattern: Pattern, subject: Subject) throws {
        let executable = try Self.executable.get()
        let outcome = try ChildProcess.run(executable, [pattern.rawValue, subject.rawValue], timeout: 30)
        let context =
            "exit \(outcome.reason == .exit ? "status" : "signal") \(outcome.status); stdout: \(outcome.lines); stderr: \(outcome.stderr.prefix(400))"

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
        let executable = try Self.executable.get()
        let outcome = try ChildProcess.run(executable, ["no-such-pattern", "raw"], timeout: 30)
        #expect(outcome.reason == .exit && outcome.status == 64)
        #expect(outcome.stderr.contains("usage:"))
    }
}

extension ChildProcess.Outcome {
    /// The last step the crash-pattern executable announced before it died or finished.
    var lastStep: String? {
        self.lines.last { $0.hasPrefix("step=") }.map { String($0.dropFirst("step=".count)) }
    }
}
