import MetronomeMeasurements
import Testing

@testable import MetronomeWorkloads

/// A short stress round in this process, on every subject: the operation budget is spent
/// exactly, and every invariant holds.
@Suite(.serialized) struct StressRunTests {
    @Test(.timeLimit(.minutes(3)))
    func shortRoundOnEverySubjectBreaksNoInvariant() async throws {
        let operations = 20_000
        let configuration = StressConfiguration(
            threads: 4, durationSeconds: nil, operations: operations, load: 0, timers: 16,
            backends: StressSubjects.names,
            seed: 7)
        let violations = StressViolations()
        let subjects = try StressSubjects.make(
            configuration.backends, timers: configuration.timers, violations: violations)
        // The scheduler subject audits its events from a task. The round blocks until it ends,
        // so it runs on a thread of its own rather than on one of the few threads every task
        // and every other test shares, which would leave that task none.
        let outcome = LockedCondition<Result<(results: [StressResult], seconds: Double)?, any Error>?>(nil)
        let round = try PosixThread.spawn {
            let runner = StressRunner(
                subjects: subjects, configuration: configuration, violations: violations, progress: nil)
            let result = Result { try runner.run() }
            outcome.update { $0 = result }
        }
        #expect(await eventually(timeout: .seconds(170)) { outcome.withLock { $0 } != nil })
        round.join()
        let run = try #require(try outcome.withLock { $0 }?.get(), "a stress thread stalled: \(violations.examples)")
        #expect(run.results.map(\.backend) == StressSubjects.names)
        #expect(run.results.reduce(0) { $0 + $1.operations } == operations)
        for result in run.results where result.backend != "scheduler" {
            #expect((result.handlerContexts ?? 0) > 0, "\(result.backend) scheduled nothing")
        }
        #expect(violations.total == 0, "\(violations.examples)")
        #expect(StressResult.total(run.results, seconds: run.seconds).violationsTotal == 0)
    }
}
