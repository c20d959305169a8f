import Testing

@testable import Metronome

/// What GCD's ticks become under each ``MissedTickPolicy``: a schedule due every 10 ns from
/// 10 ns, whose first event is handled at 35 ns, after the deadlines at 20 and 30 ns passed.
@Suite struct MissedTickPolicyTests {
    private func counter(_ policy: MissedTickPolicy) throws -> DispatchTickCounter {
        let schedule = try #require(
            TimerSchedule(deadlineNanoseconds: 10, periodNanoseconds: 10, missedTicks: policy))
        return DispatchTickCounter(schedule: schedule)
    }

    @Test func skipFiresOnceForTheLatestDeadlineAndCountsTheOthers() throws {
        var counter = try self.counter(.skip)
        let (ticks, moved) = counter.next(firedNanoseconds: 35)
        #expect(ticks.map(\.scheduled.nanoseconds) == [30])
        #expect(ticks.map(\.missed) == [2])
        #expect(moved == nil)
        #expect(counter.next(firedNanoseconds: 40).ticks.map(\.sequence) == [3], "on the grid")
    }

    @Test func burstFiresEveryMissedDeadlineThenStaysOnTheGrid() throws {
        var counter = try self.counter(.burst)
        let (ticks, moved) = counter.next(firedNanoseconds: 35)
        #expect(ticks.map(\.scheduled.nanoseconds) == [10, 20, 30])
        #expect(ticks.map(\.missed) == [0, 0, 0])
        #expect(ticks.map(\.sequence) == [0, 1, 2])
        #expect(moved == nil)
        #expect(counter.next(firedNanoseconds: 40).ticks.map(\.scheduled.nanoseconds) == [40])
    }

    @Test func delayFiresOnceAndMovesTheGridAPeriodPastTheFiring() throws {
        var counter = try self.counter(.delay)
        let (ticks, moved) = counter.next(firedNanoseconds: 35)
        #expect(ticks.map(\.scheduled.nanoseconds) == [10])
        #expect(ticks.map(\.missed) == [0])
        #expect(moved == 45)
        let next = counter.next(firedNanoseconds: 45).ticks
        #expect(next.map(\.scheduled.nanoseconds) == [45])
        #expect(next.map(\.sequence) == [1])
    }

    @Test func anOnTimeTickIsTheSameUnderEveryPolicy() throws {
        for policy in MissedTickPolicy.allCases {
            var counter = try self.counter(policy)
            let (ticks, moved) = counter.next(firedNanoseconds: 12)
            #expect(ticks.map(\.scheduled.nanoseconds) == [10], "\(policy)")
            #expect(ticks.map(\.missed) == [0] && moved == nil, "\(policy)")
        }
    }

    @Test func aScheduleCarriesItsPolicyThroughTheTimer() {
        let timer = SafeDispatchTimer(backend: .dispatch)
        defer { timer.cancel() }
        #expect(timer.schedule(after: .seconds(60), every: .seconds(1), missedTicks: .burst) { _ in })
        #expect(timer.currentSchedule?.missedTicks == .burst)
        #expect(timer.reschedule(after: .seconds(30), every: .seconds(2)))
        #expect(timer.currentSchedule?.missedTicks == .burst, "a reschedule keeps the policy")
    }
}
