import Foundation
import Testing

@testable import MetronomeMeasurements

@Suite struct JitterThreadsTests {
    /// Records one sample, if given its lateness, then waits for its recorder to complete.
    private struct OneSample: JitterSubject {
        let name = "one-sample"
        let latenessNanoseconds: Int64?

        func run(_ config: JitterConfiguration, recorder: LatencyRecorder) throws -> SubjectCounters {
            if let latenessNanoseconds {
                recorder.record(scheduledNanoseconds: 0, firedNanoseconds: latenessNanoseconds, missed: 0)
            }
            guard recorder.waitUntilComplete(timeout: .seconds(30)) else {
                throw MeasurementError.timedOut(
                    backend: self.name, recorded: recorder.summary.samples, expected: recorder.target)
            }
            return SubjectCounters(wakeups: 1, note: "one-sample: a note every thread gives")
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func aBreakOnOneThreadEndsEveryThreadsRun() throws {
        var made = 0
        let subject = JitterThreads(name: "one-sample", cpus: [nil, nil, nil]) { _ in
            defer { made += 1 }
            return OneSample(latenessNanoseconds: made == 0 ? 5_000_000 : nil)
        }
        let results = try JitterRunner.run(
            subjects: [subject], config: JitterConfiguration(samples: 10, warmup: 0), breakAboveNanoseconds: 1_000_000)
        let result = try #require(results.first)
        #expect(result.threads?.map(\.samples) == [1, 0, 0])
        #expect(result.samples == 1)
        // Within the histogram's 3 significant digits of the 5 ms recorded.
        #expect((5_000...5_005).contains(result.maxMicroseconds))
        #expect(result.threads?.first?.maxMicroseconds == result.maxMicroseconds)
        // The threads' wake-ups add up; their shared note is given once.
        #expect(result.note?.components(separatedBy: "a note every thread gives").count == 2)
    }
}
