import Testing

@testable import MetronomeWorkloads

/// Each scale subject on a few timers, in this process: every timer armed for the fire phase
/// fires once, and the engine's never fire before their deadlines.
@Suite(.serialized) struct ScaleProbeTests {
    static let config = ScaleConfiguration(
        timers: 64, gcdTimers: 32, operations: 256, fireWindowNanoseconds: 1_000_000, seed: 3, shards: 2)

    /// The subjects by their row names.
    enum Backend: String, CaseIterable, Sendable {
        case core
        case engineSwift = "engine-swift"
        case gcd

        var subject: any ScaleSubject {
            switch self {
            case .core: CoreScaleSubject()
            case .engineSwift: SwiftScaleSubject()
            case .gcd: DispatchScaleSubject()
            }
        }

        /// GCD runs its own, smaller count.
        var timers: Int { self == .gcd ? ScaleProbeTests.config.gcdTimers : ScaleProbeTests.config.timers }
    }

    @Test(.timeLimit(.minutes(3)), arguments: Backend.allCases, AccessOrder.allCases)
    func firesEveryTimerOfTheFirePhaseOnce(backend: Backend, order: AccessOrder) throws {
        var config = Self.config
        config.order = order
        let result = try backend.subject.run(config)
        #expect(result.backend == backend.rawValue)
        #expect(result.timers == backend.timers)
        #expect(result.fired == backend.timers)
        // GCD's handler reads the clock after its queue hop; only the engine's firing time
        // is a reading the never-early contract covers.
        if backend != .gcd { #expect(result.early == 0) }
    }

    // The task-sleep rows are tested through the CLI only: their tasks need a free thread of
    // the cooperative pool, which other tests in this process hold while they wait.

    /// The armed-count subjects' rows at 10 and 200 armed, with a limit no run reaches.
    private func armedRows(_ subject: any ArmedScaleSubject) throws -> [ArmedScaleResult] {
        var config = Self.config
        config.armed = [10, 200]
        config.armedOperations = 500
        config.timeLimitNanoseconds = 600_000_000_000
        return try subject.run(config)
    }

    @Test(.timeLimit(.minutes(3)))
    func nioFinishesEveryPairWithinAGenerousLimitOnTheLoopAndFromAnotherThread() throws {
        let rows = try self.armedRows(EventLoopScaleSubject())
        let backends = ["nio-loop", "nio-thread", "nio-callback"]
        #expect(rows.map(\.backend) == backends + backends)
        #expect(rows.map(\.armed) == [10, 10, 10, 200, 200, 200])
        #expect(rows.map(\.perPair) == [.allocates, .allocates, .reuses, .allocates, .allocates, .reuses])
        for row in rows {
            #expect(row.finished)
            #expect(row.pairs == 500)
            #expect(row.pairsDone == 500)
            #expect((row.addCancelPerSecond ?? 0) > 0)
        }
    }

    @Test(.timeLimit(.minutes(3)))
    func aNIORunPastTheTimeLimitStopsAndDoesNotFinish() throws {
        var config = Self.config
        config.armed = [10]
        config.armedOperations = 100_000
        // No time at all: the first look at the clock, after 64 pairs, stops the run.
        config.timeLimitNanoseconds = 0
        let rows = try EventLoopScaleSubject().run(config)
        #expect(rows.map(\.backend) == ["nio-loop", "nio-thread", "nio-callback"])
        for row in rows {
            #expect(!row.finished)
            #expect(row.addCancelPerSecond == nil)
            #expect(row.pairsDone == 64)
        }
    }

    @Test(.timeLimit(.minutes(3)))
    func theEngineFinishesEveryPairMakingATimerPerPairAndRearmingOne() throws {
        let rows = try self.armedRows(EngineArmedScaleSubject())
        #expect(rows.map(\.backend) == ["engine-new", "engine-reuse", "engine-new", "engine-reuse"])
        #expect(rows.map(\.armed) == [10, 10, 200, 200])
        #expect(rows.map(\.perPair) == [.allocates, .reuses, .allocates, .reuses])
        for row in rows {
            #expect(row.finished)
            #expect(row.pairsDone == 500)
            #expect((row.addCancelPerSecond ?? 0) > 0)
        }
    }

    @Test func creationOrderGoesRoundEveryTimerFromEachThreadsShareOfThem() {
        var second = AccessOrder.creation.picks(among: 10, seed: 1, thread: 1, of: 2)
        #expect((0..<12).map { _ in second.next() } == [5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5, 6])
        var first = AccessOrder.creation.picks(among: 10, seed: 1, thread: 0, of: 2)
        #expect(first.next() == 0)
    }

    @Test func randomPicksReachEveryTimerAndNoOther() {
        var picks = AccessOrder.random.picks(among: 7, seed: 1)
        let drawn = (0..<1000).map { _ in picks.next() }
        #expect(drawn.allSatisfy { (0..<7).contains($0) })
        #expect(Set(drawn).count == 7)
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
