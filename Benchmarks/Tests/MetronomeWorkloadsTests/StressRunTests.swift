import Testing

@testable import MetronomeWorkloads

/// A short stress round in this process, on every subject: the operation budget is spent
/// exactly, and every invariant holds.
@Suite(.serialized) struct StressRunTests {
    @Test(.timeLimit(.minutes(3)))
    func shortRoundOnEverySubjectBreaksNoInvariant() throws {
        let operations = 20_000
        let violations = StressViolations()
        let subjects = try StressSubjects.make(StressSubjects.names, timers: 16, violations: violations)
        let runner = StressRunner(
            subjects: subjects, threads: 4, seconds: nil, operations: operations, load: 0, seed: 7,
            violations: violations, progress: nil)
        let run = try #require(try runner.run(), "a stress thread stalled: \(violations.examples)")
        #expect(run.results.map(\.backend) == StressSubjects.names)
        #expect(run.results.reduce(0) { $0 + $1.operations } == operations)
        for result in run.results where result.backend != "scheduler" {
            #expect((result.handlerContexts ?? 0) > 0, "\(result.backend) scheduled nothing")
        }
        #expect(violations.total == 0, "\(violations.examples)")
        #expect(StressResult.total(run.results, seconds: run.seconds).violationsTotal == 0)
    }
}
