// A client in top-level code, as a newcomer writes `main.swift`: both forms of
// `withDeadline` with a body that throws its own typed error; a deadline that passes,
// whose `CancellationError` comes out never before it; `await engine.shutdown()`; and an
// error that prints what happened. `ProposedConcurrency` stands in for the standard's
// `withDeadline`: every unqualified call must still pick Metronome's.
import Metronome
import ProposedConcurrency

struct LookupError: Error, Equatable {
    var key: String
}

func lookUp(_ key: String) async throws(LookupError) -> Int {
    guard key == "answer" else { throw LookupError(key: key) }
    return 42
}

func check(_ condition: Bool, _ what: String) {
    guard condition else { fatalError("client: \(what)") }
    print("client: \(what)")
}

// The body's own typed error comes out as it is: `error` is a `LookupError`, no cast.
let answer = try await withDeadline(in: .seconds(5)) { () async throws(LookupError) in try await lookUp("answer") }
check(answer == 42, "withDeadline(in:) returns the body's result")
do {
    _ = try await withDeadline(ContinuousClock.now + .seconds(5), clock: ContinuousClock()) {
        () async throws(LookupError) in try await lookUp("question")
    }
    check(false, "withDeadline(_:clock:) threw nothing")
} catch {
    check(error == LookupError(key: "question"), "withDeadline(_:clock:) throws the body's typed error")
}

// At the deadline the body is cancelled; what comes out is its own CancellationError, and
// the body saw the cancellation no earlier than the deadline.
let engine = try TimerEngine(configuration: .init(name: "client"))
let clock = EngineClock(backend: .engine(engine))
let deadline = clock.now + .milliseconds(20)
let outcome = await Task {
    try await withDeadline(deadline, clock: clock) { () async throws -> TimerInstant in
        do {
            try await Task.sleep(for: .seconds(60))
        } catch is CancellationError where Task.isEngineDeadlineExpired {
            throw Expired(at: clock.now)
        }
        return clock.now
    }
}.result
struct Expired: Error {
    var at: TimerInstant
}
switch outcome {
case .failure(let error as Expired): check(error.at >= deadline, "the deadline cancelled the body, not before it")
default: check(false, "the deadline did not cancel the body: \(outcome)")
}
let cancelled = await Task {
    try await withDeadline(in: .milliseconds(5)) { try await Task.sleep(for: .seconds(60)) }
}.result
check(
    (try? cancelled.get()) == nil && cancelled.error is CancellationError,
    "a deadline throws the body's CancellationError")

// Shut down from top-level code, then an error that reads as what happened.
await engine.shutdown()
do {
    try await Task.sleep(for: .milliseconds(1), clock: clock)
    check(false, "a sleep on a stopped engine returned")
} catch let error as TimerError {
    check("\(error)" == "the timer's engine was shut down", "\(error)")
    check(!"\(error)".contains("errno"), "no errno in the description")
}

// Which function each call picked: every unqualified one was Metronome's.
check(standardCalls.load(ordering: .relaxed) == 0, "no unqualified call picked the standard's withDeadline")
_ = await ProposedConcurrency.withDeadline(in: .seconds(1)) { 1 }
check(standardCalls.load(ordering: .relaxed) == 1, "a module-qualified call picks the standard's")

extension Result {
    var error: Failure? {
        guard case .failure(let error) = self else { return nil }
        return error
    }
}
