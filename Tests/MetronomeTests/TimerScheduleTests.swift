import Testing

@testable import Metronome

private let oneShot = TimerSchedule(deadlineNanoseconds: 1_000, leewayNanoseconds: 10)!

@Suite struct TimerScheduleTests {
    @Test(arguments: [
        (deadline: Int64(-1), period: Int64?.none, leeway: Int64(0)),
        (deadline: .min, period: 100, leeway: 0),
        (deadline: 0, period: 0, leeway: 0),
        (deadline: 0, period: -1, leeway: 0),
        (deadline: 0, period: .min, leeway: 0),
        (deadline: 0, period: nil, leeway: -1),
        (deadline: 0, period: 100, leeway: -1),
        (deadline: .max, period: nil, leeway: 1),
        (deadline: .max - 5, period: nil, leeway: 6),
        (deadline: .max - 50, period: 100, leeway: 1_000),
    ])
    func initRejects(deadline: Int64, period: Int64?, leeway: Int64) {
        let schedule = TimerSchedule(
            deadlineNanoseconds: deadline,
            periodNanoseconds: period,
            leewayNanoseconds: leeway
        )
        #expect(schedule == nil)
    }

    @Test(arguments: [
        (period: Int64?.none, leeway: Int64(500), stored: Int64(500)),
        (period: 100, leeway: 500, stored: 100),
        (period: 100, leeway: 100, stored: 100),
        (period: 100, leeway: 99, stored: 99),
        (period: 1, leeway: .max, stored: 1),
    ])
    func leewayIsClampedToThePeriod(period: Int64?, leeway: Int64, stored: Int64) throws {
        let schedule = try #require(
            TimerSchedule(deadlineNanoseconds: 7, periodNanoseconds: period, leewayNanoseconds: leeway)
        )
        #expect(schedule.leewayNanoseconds == stored)
        #expect(schedule.periodNanoseconds == period)
        #expect(schedule.isRepeating == (period != nil))
    }

    @Test func largestRepresentableWindowIsAccepted() throws {
        let oneShot = try #require(TimerSchedule(deadlineNanoseconds: .max))
        #expect(oneShot.deadlineNanoseconds == .max)
        // Valid only because the leeway is clamped before the overflow check.
        let repeating = try #require(
            TimerSchedule(deadlineNanoseconds: .max - 100, periodNanoseconds: 100, leewayNanoseconds: 1_000)
        )
        #expect(repeating.leewayNanoseconds == 100)
    }

    @Test func oneShotDeadlineNeverMoves() {
        #expect(oneShot.nextDeadline(onOrAfter: .min) == 1_000)
        #expect(oneShot.nextDeadline(onOrAfter: .max) == 1_000)
        #expect(oneShot.resumed(at: .max) == oneShot)
    }

    @Test(arguments: [
        // deadline + period overflows.
        (deadline: Int64.max - 10, period: Int64.max / 2, now: Int64.max),
        (deadline: 10, period: .max - 5, now: 20),
        // periods × period overflows: two periods of 2^62 are needed.
        (deadline: 0, period: 1 << 62, now: .max),
        (deadline: 0, period: .max, now: .max),
        // The in-phase deadline at or after Int64.max is Int64.max + 1.
        (deadline: 2, period: 3, now: .max),
    ])
    func nextDeadlineSaturates(deadline: Int64, period: Int64, now: Int64) throws {
        let schedule = try #require(TimerSchedule(deadlineNanoseconds: deadline, periodNanoseconds: period))
        #expect(schedule.nextDeadline(onOrAfter: now) == .max)
    }

    @Test func resumedKeepsTheHardExpiryRepresentable() throws {
        let schedule = try #require(
            TimerSchedule(deadlineNanoseconds: 0, periodNanoseconds: 1 << 62, leewayNanoseconds: 50)
        )
        let resumed = schedule.resumed(at: .max)
        #expect(resumed.deadlineNanoseconds == .max - 50)
        #expect(!resumed.deadlineNanoseconds.addingReportingOverflow(resumed.leewayNanoseconds).overflow)
    }

    @Test(arguments: [UInt64(1), 0xC0FFEE])
    func nextDeadlineIsTheFirstInPhaseDeadlineNotBeforeNow(seed: UInt64) throws {
        var rng = SeededGenerator(seed: seed)
        for _ in 0..<10_000 {
            let deadline = Int64.random(in: 0...1_000_000, using: &rng)
            let period = Int64.random(in: 1...5_000, using: &rng)
            let now = Int64.random(in: -1_000...2_000_000, using: &rng)
            let schedule = try #require(TimerSchedule(deadlineNanoseconds: deadline, periodNanoseconds: period))
            let next = schedule.nextDeadline(onOrAfter: now)
            #expect(next >= deadline)
            #expect(next >= now)
            #expect((next - deadline) % period == 0)
            #expect(next == deadline || next - period < now)
        }
    }
}
