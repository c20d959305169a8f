import Glibc
import Metronome
import Testing

@testable import MetronomeWorkloads

/// The stress oracle on hand-made ticks and call sequences: each rule reports what breaks it,
/// so a clean stress run means the rules held rather than that nothing was checked.
@Suite struct StressOracleTests {
    private static let period: Int64 = 1_000_000

    private func tick(scheduled: Int64, fired: Int64, missed: Int = 0, sequence: UInt64 = 0) -> Tick {
        Tick(
            scheduled: TimerInstant(nanoseconds: scheduled), fired: TimerInstant(nanoseconds: fired), missed: missed,
            sequence: sequence)
    }

    private func broken(_ ticks: [Tick], on grid: StressGrid, repeating: Bool) -> [StressInvariant] {
        let context = StressHandlerContext(token: 1, repeating: repeating, live: StressLiveObjects())
        var broken: [StressInvariant] = []
        for tick in ticks { StressTimerPool.check(tick, on: grid, context: context, broken: &broken) }
        return broken
    }

    @Test func oneShotFiringTwiceIsReported() {
        let grid = StressGrid(start: 5_000, period: nil)
        let once = self.tick(scheduled: 5_000, fired: 5_100)
        #expect(self.broken([once], on: grid, repeating: false).isEmpty)
        #expect(self.broken([once, once], on: grid, repeating: false) == [.oneShotTwice])
    }

    @Test func missedPeriodsMustMatchTheLateness() {
        let grid = StressGrid(start: 0, period: Self.period)
        let skippedBeforeTheStart = self.tick(scheduled: Self.period, fired: Self.period + 1, missed: 2, sequence: 1)
        #expect(self.broken([skippedBeforeTheStart], on: grid, repeating: true) == [.missedVersusLateness])
        // Late by exactly two periods: on time for the latest deadline, which is right.
        let wholePeriodsLate = self.tick(scheduled: 3 * Self.period, fired: 3 * Self.period, missed: 2, sequence: 3)
        #expect(self.broken([wholePeriodsLate], on: grid, repeating: true).isEmpty)
        let tooLate = self.tick(scheduled: Self.period, fired: 3 * Self.period, sequence: 1)
        #expect(self.broken([tooLate], on: grid, repeating: true) == [.missedVersusLateness])
    }

    @Test func sequenceMustAdvanceByMissedPlusOne() {
        let grid = StressGrid(start: 0, period: Self.period)
        let first = self.tick(scheduled: Self.period, fired: Self.period, sequence: 1)
        let next = self.tick(scheduled: 2 * Self.period, fired: 2 * Self.period, sequence: 2)
        let skipped = self.tick(scheduled: 4 * Self.period, fired: 4 * Self.period + 1, sequence: 4)
        let repeated = self.tick(scheduled: Self.period, fired: Self.period, sequence: 1)
        #expect(self.broken([first, next], on: grid, repeating: true).isEmpty)
        #expect(self.broken([first, skipped], on: grid, repeating: true) == [.sequenceGap])
        #expect(self.broken([first, repeated], on: grid, repeating: true) == [.sequenceNotIncreasing])
    }

    @Test func entryAfterAStopBeyondTheInFlightOneIsReported() {
        var shadow = StressShadow()
        let grid = StressGrid(start: 0, period: Self.period)
        shadow.register(grid, token: 1)
        let ticket = shadow.begin(.cancel(allowance: 1))
        shadow.end(ticket, .cancel(allowance: 1), accepted: true)
        var broken: [StressInvariant] = []
        var gated = false
        for scheduled in [Self.period, 2 * Self.period] {
            _ = shadow.enter(token: 1, scheduled: scheduled, broken: &broken, gated: &gated)
            shadow.exit()
        }
        #expect(gated)
        #expect(broken == [.afterCancel], "the in-flight entry is allowed, the next is not")
    }

    @Test func tickOffEveryArmedGridIsReported() {
        var shadow = StressShadow()
        shadow.register(StressGrid(start: 0, period: Self.period), token: 1)
        var broken: [StressInvariant] = []
        var gated = false
        #expect(shadow.enter(token: 1, scheduled: Self.period / 2, broken: &broken, gated: &gated) == nil)
        #expect(broken == [.offSchedule])
    }

    @Test func totalSumsOperationsAndViolationsOfEveryRow() {
        let engine = StressResult(
            backend: "engine", seconds: 1, operationsByKind: ["cancel": 3], handlerEntries: 5,
            violations: [.early: 1])
        let scheduler = StressResult(
            backend: "scheduler", seconds: 1, operationsByKind: ["cancel": 4], handlerEntries: 2,
            violations: [.early: 2, .stall: 1])
        let total = StressResult.total([engine, scheduler], seconds: 1)
        #expect(total.backend == "all")
        #expect(total.operationsByKind == ["engine.cancel": 3, "scheduler.cancel": 4])
        #expect(total.handlerEntries == 7)
        #expect(total.violations[StressInvariant.early.rawValue] == 3)
        #expect(total.violations[StressInvariant.stall.rawValue] == 1)
        #expect(total.violationsTotal == 4)
    }

    /// A forked child is judged by how it ended: a clean exit is no violation, a crash or an
    /// exit code is described (a hang is killed after ``StressChild/bound`` the same way).
    @Test(.enabled(if: StressSubjects.forksChildren))
    func aChildThatCrashesOrFailsIsDescribed() {
        #expect(StressChild.run { 0 } == nil)
        #expect(StressChild.run { 12 } == "child ended with signal 0, exit 12")
        #expect(StressChild.run { kill(getpid(), SIGKILL) } == "child ended with signal 9, exit 0")
    }
}
