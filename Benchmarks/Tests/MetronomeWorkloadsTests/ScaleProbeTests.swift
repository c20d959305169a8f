import Testing

@testable import MetronomeWorkloads

/// Each scale subject on a few timers, in this process: every timer armed for the fire phase
/// fires once, and the engine's never fire before their deadlines.
@Suite(.serialized) struct ScaleProbeTests {
    private static let config = ScaleConfiguration(
        timers: 64, gcdTimers: 32, operations: 256, fireWindowNanoseconds: 1_000_000, seed: 3)

    @Test(.timeLimit(.minutes(3)))
    func coreFiresEveryTimerNeverEarly() throws {
        let result = try CoreScaleSubject().run(Self.config)
        #expect(result.backend == "core")
        #expect(result.timers == 64)
        #expect(result.fired == 64)
        #expect(result.early == 0)
    }

    @Test(.timeLimit(.minutes(3)))
    func swiftAPIFiresEveryTimerNeverEarly() throws {
        let result = try SwiftScaleSubject().run(Self.config)
        #expect(result.backend == "engine-swift")
        #expect(result.timers == 64)
        #expect(result.fired == 64)
        #expect(result.early == 0)
    }

    @Test(.timeLimit(.minutes(3)))
    func dispatchRunsItsOwnSmallerTimerCount() throws {
        let result = try DispatchScaleSubject().run(Self.config)
        #expect(result.backend == "gcd")
        #expect(result.timers == 32)
        #expect(result.fired == 32)
    }

    @Test func fireLogKeepsTheFirstExpectedFiringsAndCountsDisorder() {
        let log = FireLog(expected: 3)
        for (scheduled, fired) in [(10, 11), (30, 31), (20, 25), (40, 41)] {
            log.record(scheduledNanoseconds: Int64(scheduled), firedNanoseconds: Int64(fired))
        }
        #expect(log.waitUntilComplete(timeoutSeconds: 1))
        let summary = log.summary(firstDeadlineNanoseconds: 10)
        #expect(summary.latency.samples == 3)
        #expect(summary.outOfOrder == 1)
        #expect(summary.latency.early == 0)
    }
}
