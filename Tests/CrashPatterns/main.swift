// metronome-crash-patterns <pattern> <subject>
//
// Performs one of the four ways a `DispatchSourceTimer` is commonly crashed (unbalanced
// suspends, release while suspended, cancel while suspended, over-resume) in a process of
// its own, so a test can watch it die on a raw source and survive through
// `SafeDispatchTimer`.
//
//   pattern: double-suspend-release | cancel-while-suspended | release-while-suspended
//            | resume-after-cancel
//   subject: raw | engine | dispatch
//
// Output, one line each, flushed as it goes so the last line before a crash says where the
// process died: `step=<call>` before every call, then for the safe subjects
// `calls=<call>:<result> ...` and `state=<state>`, and `survived` at the very end (exit 0).
// Exit status 64 means bad arguments.

@preconcurrency import Dispatch
import Glibc
import Metronome

enum Pattern: String, CaseIterable {
    /// Suspend twice, resume once, release: the source is still suspended at release.
    case doubleSuspendRelease = "double-suspend-release"
    /// Cancel a suspended source, then release it (libdispatch checks at release).
    case cancelWhileSuspended = "cancel-while-suspended"
    /// Release a suspended source.
    case releaseWhileSuspended = "release-while-suspended"
    /// Cancel, then resume a source that is not suspended: an over-resume.
    case resumeAfterCancel = "resume-after-cancel"
}

enum Subject: String, CaseIterable {
    case raw, engine, dispatch
}

func say(_ line: String) {
    print(line)
    fflush(nil)  // every stream: the next call may kill the process
}

/// The calls of `pattern` on a raw source, released when this function returns.
@inline(never)
func runRaw(_ pattern: Pattern) {
    let queue = DispatchQueue(label: "metronome.crash-patterns")
    let timer = DispatchSource.makeTimerSource(queue: queue)
    timer.schedule(deadline: .now() + .milliseconds(1), repeating: .milliseconds(1))
    timer.setEventHandler {}
    timer.activate()
    usleep(3_000)  // let it fire a few times
    switch pattern {
    case .doubleSuspendRelease:
        say("step=suspend")
        timer.suspend()
        say("step=suspend")
        timer.suspend()
        say("step=resume")
        timer.resume()
    case .cancelWhileSuspended:
        say("step=suspend")
        timer.suspend()
        say("step=cancel")
        timer.cancel()
    case .releaseWhileSuspended:
        say("step=suspend")
        timer.suspend()
    case .resumeAfterCancel:
        say("step=cancel")
        timer.cancel()
        say("step=resume")
        timer.resume()
    }
    say("step=release")
}

/// The same calls on a `SafeDispatchTimer`, which is then released.
@inline(never)
func runSafe(_ pattern: Pattern, backend: SafeDispatchTimer.Backend) {
    var timer: SafeDispatchTimer? = SafeDispatchTimer(backend: backend)
    var calls: [String] = []
    func call(_ name: String, _ body: (SafeDispatchTimer) -> Bool) {
        say("step=\(name)")
        calls.append("\(name):\(body(timer!))")
    }
    call("schedule") { $0.schedule(interval: 0.001) {} }
    usleep(3_000)  // let it fire a few times
    switch pattern {
    case .doubleSuspendRelease:
        call("suspend") { $0.suspend() }
        call("suspend") { $0.suspend() }
        call("resume") { $0.resume() }
    case .cancelWhileSuspended:
        call("suspend") { $0.suspend() }
        call("cancel") { $0.cancel() }
    case .releaseWhileSuspended:
        call("suspend") { $0.suspend() }
    case .resumeAfterCancel:
        call("cancel") { $0.cancel() }
        call("resume") { $0.resume() }
    }
    say("calls=\(calls.joined(separator: " "))")
    say("state=\(timer!.state)")
    say("step=release")
    timer = nil
}

// A crash is the expected outcome for `raw`: no core file for it.
var noCore = rlimit(rlim_cur: 0, rlim_max: 0)
_ = setrlimit(__rlimit_resource_t(RLIMIT_CORE.rawValue), &noCore)

let arguments = CommandLine.arguments.dropFirst()
guard arguments.count == 2, let pattern = Pattern(rawValue: arguments.first!),
    let subject = Subject(rawValue: arguments.last!)
else {
    let patterns = Pattern.allCases.map(\.rawValue).joined(separator: "|")
    let subjects = Subject.allCases.map(\.rawValue).joined(separator: "|")
    let usage = "usage: metronome-crash-patterns <\(patterns)> <\(subjects)>\n"
    _ = usage.withCString { write(2, $0, strlen($0)) }
    exit(64)
}

switch subject {
case .raw:
    runRaw(pattern)
case .engine:
    runSafe(pattern, backend: .engine(.shared))
case .dispatch:
    runSafe(pattern, backend: .dispatch)
}
say("step=released")
// libdispatch may trap on a later turn of its queues, not inside the call: give it a moment.
usleep(200_000)
say("survived")
exit(0)
