import Foundation
import Testing

@testable import MetronomeMeasurements

@Suite struct LatencyRecorderTests {
    /// Asserts `value` is within HdrHistogram's 3-significant-digit precision of `expected`.
    private func expectClose(_ value: Int64, _ expected: Int64, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(
            abs(value - expected) <= expected / 500 + 1,
            "\(value) is not within 0.2 % of \(expected)",
            sourceLocation: sourceLocation
        )
    }

    /// Asserts the summary's sample and miss counts exactly and its largest lateness within
    /// the histogram's precision.
    private func expectSummary(
        _ summary: LatencySummary, samples: Int, missed: Int, maxNanoseconds: Int64,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        #expect(summary.samples == samples, sourceLocation: sourceLocation)
        #expect(summary.missed == missed, sourceLocation: sourceLocation)
        self.expectClose(summary.maxNanoseconds, maxNanoseconds, sourceLocation: sourceLocation)
    }

    @Test func percentilesOfOneToOneThousandMicroseconds() {
        let recorder = LatencyRecorder(target: 1_000)
        for microseconds in Int64(1)...1_000 {
            recorder.record(scheduledNanoseconds: 5_000, firedNanoseconds: 5_000 + microseconds * 1_000, missed: 0)
        }
        let summary = recorder.summary
        #expect(summary.samples == 1_000)
        expectClose(summary.minNanoseconds, 1_000)
        expectClose(summary.p50Nanoseconds, 500_000)
        expectClose(summary.p90Nanoseconds, 900_000)
        expectClose(summary.p99Nanoseconds, 990_000)
        expectClose(summary.p999Nanoseconds, 999_000)
        expectClose(summary.maxNanoseconds, 1_000_000)
        #expect(abs(summary.p50Microseconds - 500) <= 1)
        #expect(summary.missed == 0)
        #expect(summary.early == 0)
    }

    @Test func earlyFiringsAreCountedAndRecordedAsZero() {
        let recorder = LatencyRecorder(target: 3)
        recorder.record(scheduledNanoseconds: 1_000, firedNanoseconds: 990, missed: 0)
        recorder.record(scheduledNanoseconds: 1_000, firedNanoseconds: 1_000, missed: 0)
        recorder.record(scheduledNanoseconds: 1_000, firedNanoseconds: 3_000, missed: 0)
        let summary = recorder.summary
        #expect(summary.early == 1)
        #expect(summary.samples == 3)
        #expect(summary.minNanoseconds == 0)
        expectClose(summary.maxNanoseconds, 2_000)
    }

    @Test func missedDeadlinesAccumulate() {
        let recorder = LatencyRecorder(target: 3)
        recorder.record(scheduledNanoseconds: 0, firedNanoseconds: 10, missed: 2)
        recorder.record(scheduledNanoseconds: 0, firedNanoseconds: 10, missed: 0)
        recorder.record(scheduledNanoseconds: 0, firedNanoseconds: 10, missed: 3)
        #expect(recorder.summary.missed == 5)
    }

    @Test func warmUpIsDiscarded() {
        let recorder = LatencyRecorder(target: 5, discardFirst: 3)
        for _ in 0..<3 {
            recorder.record(scheduledNanoseconds: 0, firedNanoseconds: 1_000_000_000, missed: 7)
        }
        #expect(recorder.summary.samples == 0)
        for _ in 0..<5 {
            recorder.record(scheduledNanoseconds: 0, firedNanoseconds: 2_000, missed: 0)
        }
        expectSummary(recorder.summary, samples: 5, missed: 0, maxNanoseconds: 2_000)
        #expect(recorder.firings == 8)
    }

    @Test func firingsPastTheTargetAreNotRecorded() {
        let recorder = LatencyRecorder(target: 2)
        for lateness in [Int64(100), 200, 900_000, 1_000_000] {
            recorder.record(scheduledNanoseconds: 0, firedNanoseconds: lateness, missed: 1)
        }
        expectSummary(recorder.summary, samples: 2, missed: 2, maxNanoseconds: 200)
        #expect(recorder.firings == 4 && recorder.isComplete)
    }

    @Test func mergeAddsAnotherRecordersSamplesAndCounts() {
        let total = LatencyRecorder(target: 4)
        let first = LatencyRecorder(target: 2)
        first.record(scheduledNanoseconds: 0, firedNanoseconds: 1_000, missed: 1)
        first.record(scheduledNanoseconds: 0, firedNanoseconds: 2_000, missed: 0)
        let second = LatencyRecorder(target: 2)
        second.record(scheduledNanoseconds: 5_000, firedNanoseconds: 4_000, missed: 0)
        second.record(scheduledNanoseconds: 0, firedNanoseconds: 9_000, missed: 2)
        total.merge(first)
        total.merge(second)
        let summary = total.summary
        expectSummary(summary, samples: 4, missed: 3, maxNanoseconds: 9_000)
        #expect(summary.early == 1 && summary.minNanoseconds == 0)
        #expect(total.firings == 4 && total.isComplete)
    }

    @Test func waitTimesOutWhileIncomplete() {
        let recorder = LatencyRecorder(target: 2)
        recorder.record(scheduledNanoseconds: 0, firedNanoseconds: 1, missed: 0)
        let started = MonotonicTime.now()
        #expect(!recorder.waitUntilComplete(timeout: .milliseconds(50)))
        #expect(MonotonicTime.now() - started >= 50_000_000)
        #expect(!recorder.isComplete)
    }

    @Test func waitReturnsWhenAnotherThreadCompletes() throws {
        let recorder = LatencyRecorder(target: 100)
        let producer = try PosixThread.spawn {
            for _ in 0..<100 {
                recorder.record(scheduledNanoseconds: 0, firedNanoseconds: 1, missed: 0)
            }
        }
        defer { producer.join() }
        #expect(recorder.waitUntilComplete(timeout: .seconds(30)))
        #expect(recorder.summary.samples == 100)
    }

    @Test func waitReturnsAtOnceWhenAlreadyComplete() {
        let recorder = LatencyRecorder(target: 0)
        #expect(recorder.waitUntilComplete(timeout: .zero))
    }

    @Test func writesAPercentileFileInMicroseconds() throws {
        let recorder = LatencyRecorder(target: 1_000)
        for microseconds in Int64(1)...1_000 {
            recorder.record(scheduledNanoseconds: 0, firedNanoseconds: microseconds * 1_000, missed: 0)
        }
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("latency-\(UUID()).hgrm").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        try recorder.writePercentileDistribution(to: path)
        let text = try String(contentsOfFile: path, encoding: .utf8)
        let lines = text.split(separator: "\n")
        #expect(lines.first?.split(separator: " ") == ["Value", "Percentile", "TotalCount", "1/(1-Percentile)"])
        let maxLine = try #require(lines.first { $0.hasPrefix("#[Max") })
        let maxValue = try #require(
            Double(maxLine.split(separator: "=")[1].split(separator: ",")[0].trimmingCharacters(in: .whitespaces))
        )
        #expect(abs(maxValue - 1_000) <= 2)
        #expect(maxLine.contains("Total count    =         1000"))
    }

    @Test func aFiringAboveTheBreakThresholdCompletesTheRecorderAndIsKept() {
        let recorder = LatencyRecorder(target: 100, discardFirst: 1, breakAboveNanoseconds: 1_000)
        recorder.record(scheduledNanoseconds: 0, firedNanoseconds: 50_000, missed: 0)  // warm-up
        recorder.record(scheduledNanoseconds: 0, firedNanoseconds: 200, missed: 0)
        recorder.record(scheduledNanoseconds: 0, firedNanoseconds: 1_000, missed: 0)
        #expect(!recorder.isComplete)
        recorder.record(scheduledNanoseconds: 10, firedNanoseconds: 1_011, missed: 0)
        #expect(recorder.isComplete)
        #expect(recorder.waitUntilComplete(timeout: .zero))
        #expect(
            recorder.firstBreak == LatencyRecorder.Break(latenessNanoseconds: 1_001, firedNanoseconds: 1_011, sample: 3)
        )
        recorder.record(scheduledNanoseconds: 0, firedNanoseconds: 9_000, missed: 0)
        #expect(recorder.summary.samples == 3)

        let merged = LatencyRecorder(target: 100)
        let before = LatencyRecorder(target: 2)
        before.record(scheduledNanoseconds: 0, firedNanoseconds: 1, missed: 0)
        before.record(scheduledNanoseconds: 0, firedNanoseconds: 1, missed: 0)
        merged.merge(before)
        merged.merge(recorder)
        #expect(merged.firstBreak?.sample == 5)
    }
}
