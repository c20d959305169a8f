import Testing

@testable import MetronomeMeasurements

@Suite struct CoalesceTests {
    @Test func splitMix64MatchesTheReferenceSequence() {
        // First outputs of the reference C implementation for seed 0.
        var random = SplitMix64(seed: 0)
        #expect(random.next() == 0xE220_A839_7B1D_CDAF)
        #expect(random.next() == 0x6E78_9E6A_A1B9_65F4)
    }

    @Test func boundedValuesStayInRange() {
        var random = SplitMix64(seed: 7)
        for bound in [Int64(1), 2, 3, 1_000, 2_000_000_000] {
            for _ in 0..<1_000 {
                #expect((0..<bound).contains(random.next(below: bound)))
            }
        }
    }

    @Test func deadlinesAreDeterministicAndInsideTheWindow() {
        let config = CoalesceConfiguration(
            timers: 1_000,
            windowNanoseconds: 2_000_000_000,
            leewayNanoseconds: 50_000_000,
            seed: 9
        )
        let first = config.deadlines(now: 1_000)
        let second = config.deadlines(now: 5_000)
        #expect(first.count == 1_000)
        #expect(zip(first, second).allSatisfy { $1 - $0 == 4_000 })
        let opens = 1_000 + config.startLeadNanoseconds
        #expect(config.startLeadNanoseconds == 75_000_000)
        #expect(first.allSatisfy { (opens..<(opens + 2_000_000_000)).contains($0) })
        #expect(Set(first).count > 990)
        #expect(
            CoalesceConfiguration(seed: 10).deadlines(now: 1_000)
                != CoalesceConfiguration(seed: 9).deadlines(now: 1_000)
        )
    }

    @Test func optimumIsTheStabbingNumberOfTheWindows() {
        let config = CoalesceConfiguration(timers: 4, windowNanoseconds: 1_000, leewayNanoseconds: 10)
        #expect(config.optimumWakeups(for: [0, 5, 10, 11]) == 2)
        #expect(config.optimumWakeups(for: [0, 100, 200]) == 3)
    }

    @Test func recorderClassifiesEveryFiring() {
        let recorder = CoalesceRecorder(timers: 5, leewayNanoseconds: 100)
        recorder.record(deadlineNanoseconds: 1_000, firedNanoseconds: 999)
        recorder.record(deadlineNanoseconds: 1_000, firedNanoseconds: 1_000)
        recorder.record(deadlineNanoseconds: 1_000, firedNanoseconds: 1_100)
        #expect(!recorder.waitUntilComplete(timeout: .zero))
        recorder.record(deadlineNanoseconds: 1_000, firedNanoseconds: 1_101)
        recorder.record(deadlineNanoseconds: 2_000, firedNanoseconds: 9_000)
        #expect(recorder.waitUntilComplete(timeout: .seconds(1)))
        #expect(recorder.early == 1)
        #expect(recorder.inWindow == 2)
        #expect(recorder.late == 2)
        #expect(recorder.summary.samples == 5)
        #expect(recorder.firings == 5)
    }

    @Test func configurationsRejectBadValues() {
        #expect(throws: MeasurementError.self) { try CoalesceConfiguration(timers: 0).validate() }
        #expect(throws: MeasurementError.self) { try CoalesceConfiguration(windowNanoseconds: 0).validate() }
        #expect(throws: MeasurementError.self) { try CoalesceConfiguration(leewayNanoseconds: -1).validate() }
        #expect(throws: MeasurementError.self) { try JitterConfiguration(intervalNanoseconds: 0).validate() }
        #expect(throws: MeasurementError.self) { try JitterConfiguration(samples: 0).validate() }
        #expect(throws: MeasurementError.self) { try JitterConfiguration(timers: 0).validate() }
        #expect(throws: MeasurementError.self) { try JitterConfiguration(leewayNanoseconds: -1).validate() }
        #expect(throws: MeasurementError.self) { try JitterConfiguration(intervalNanoseconds: .max).validate() }
        #expect(throws: Never.self) { try JitterConfiguration().validate() }
        #expect(throws: Never.self) { try CoalesceConfiguration().validate() }
    }

    @Test func jitterDeadlinesSpreadTimersOverOneInterval() {
        let config = JitterConfiguration(intervalNanoseconds: 1_000, timers: 4)
        #expect((0..<4).map { config.deadline(timer: $0, tick: 0, start: 10_000) } == [10_000, 10_250, 10_500, 10_750])
        #expect(config.deadline(timer: 1, tick: 3, start: 10_000) == 13_250)
    }
}
