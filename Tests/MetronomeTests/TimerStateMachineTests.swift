import MetronomeTesting
import Testing

@testable import Metronome

// Fixtures. Force-unwrapped: the values are valid by construction.
private let oneShot = TimerSchedule(deadlineNanoseconds: 1_000, leewayNanoseconds: 10)!
private let repeating = TimerSchedule(deadlineNanoseconds: 1_000, periodNanoseconds: 100, leewayNanoseconds: 10)!
private let replacement = TimerSchedule(deadlineNanoseconds: 5_000)!
/// `repeating` resumed at `resumeTime`: 1250 falls between the deadlines 1200 and 1300.
private let resumedRepeating = TimerSchedule(
    deadlineNanoseconds: 1_300,
    periodNanoseconds: 100,
    leewayNanoseconds: 10
)!
private let resumeTime: Int64 = 1_250

// MARK: - Every state × every event

/// The arming id the seam hands out for `generation`, so tables can name it.
private func armingID(_ generation: UInt64) -> UInt64 { 100 + generation }

/// The state a transition-table row starts from.
enum StartState: String, CaseIterable, Hashable, Sendable {
    case idle, arming, runningOneShot, runningRepeating, suspended, cancelled

    /// The machine in this state; every one but `idle` handed out generation 1 only.
    func make() -> TimerStateMachine {
        var machine = TimerStateMachine()
        switch self {
        case .idle:
            break
        case .arming:
            _ = machine.schedule(oneShot)
        case .runningOneShot:
            _ = machine.schedule(oneShot)
            _ = machine.armed(generation: 1, arming: armingID(1))
        case .runningRepeating, .suspended:
            _ = machine.schedule(repeating)
            _ = machine.armed(generation: 1, arming: armingID(1))
            if self == .suspended { _ = machine.suspend() }
        case .cancelled:
            _ = machine.schedule(oneShot)
            _ = machine.armed(generation: 1, arming: armingID(1))
            _ = machine.cancel()
        }
        return machine
    }
}

/// An event of a transition-table row, with fixed arguments: "current" names generation 1
/// and its arming, "stale" ones no arming ever had.
enum TableEvent: String, CaseIterable, Hashable, Sendable {
    case schedule, reschedule, suspend, resume, cancel
    case firedCurrent, firedStale, armedCurrent, armedStale, refusedCurrent, refusedStale, abandon

    func apply(to machine: inout TimerStateMachine) -> Effect {
        switch self {
        case .schedule: machine.schedule(replacement).effect
        case .reschedule: machine.reschedule(replacement).effect
        case .suspend: machine.suspend().effect
        case .resume: machine.resume(now: resumeTime).effect
        case .cancel: machine.cancel().effect
        case .firedCurrent: machine.fired(arming: armingID(1), scheduled: 1_000).effect
        case .firedStale: machine.fired(arming: armingID(0), scheduled: 1_000).effect
        case .armedCurrent: .armed(start: machine.armed(generation: 1, arming: armingID(2)))
        case .armedStale: .armed(start: machine.armed(generation: 0, arming: armingID(2)))
        case .refusedCurrent: .refused(stopped: machine.refused(generation: 1))
        case .refusedStale: .refused(stopped: machine.refused(generation: 0))
        case .abandon: machine.abandonEffect()
        }
    }
}

/// Every action of every event, so one table can hold them all.
enum Effect: Equatable, Sendable {
    static func arm(_ arm: TimerStateMachine.Arm) -> Effect {
        .arm(arm.schedule, generation: arm.generation, disarming: arm.disarming)
    }

    case arm(TimerSchedule, generation: UInt64, disarming: UInt64?)
    case disarm(UInt64?)
    case armed(start: Bool)
    case refused(stopped: Bool)
    case keepSuspended, keepArmed, acknowledge, runHandler, ignore, reject
    /// An event that asks nothing of the owner.
    case nothing
}

extension TimerStateMachine {
    /// ``abandon()`` as a table event.
    fileprivate mutating func abandonEffect() -> Effect {
        self.abandon()
        return .nothing
    }
}

extension TimerStateMachine.ScheduleAction {
    var effect: Effect {
        switch self {
        case .arm(let arm): .arm(arm)
        case .reject: .reject
        }
    }
}

extension TimerStateMachine.RescheduleAction {
    var effect: Effect {
        switch self {
        case .arm(let arm): .arm(arm)
        case .keepSuspended: .keepSuspended
        case .keepArmed: .keepArmed
        case .reject: .reject
        }
    }
}

extension TimerStateMachine.StopAction {
    var effect: Effect {
        switch self {
        case .disarm(let arming): .disarm(arming)
        case .acknowledge: .acknowledge
        case .reject: .reject
        }
    }
}

extension TimerStateMachine.ResumeAction {
    var effect: Effect {
        switch self {
        case .arm(let arm): .arm(arm)
        case .reject: .reject
        }
    }
}

extension TimerStateMachine.FiredAction {
    var effect: Effect {
        switch self {
        case .runHandler: .runHandler
        case .arm(let arm): .arm(arm)
        case .ignore: .ignore
        }
    }
}

struct Transition: Sendable, CustomTestStringConvertible {
    var start: StartState
    var event: TableEvent
    var effect: Effect
    var end: TimerStateMachine.State

    init(_ start: StartState, _ event: TableEvent, _ effect: Effect, _ end: TimerStateMachine.State) {
        (self.start, self.event, self.effect, self.end) = (start, event, effect, end)
    }

    var testDescription: String { "\(self.start.rawValue) + \(self.event.rawValue)" }
}

/// Rows for the events no state but one accepts, with the state unchanged.
private func unchanged(_ start: StartState, _ state: TimerStateMachine.State, except: Set<TableEvent>) -> [Transition] {
    let unchangedEffect: [TableEvent: Effect] = [
        .schedule: .reject, .reschedule: .reject, .suspend: .reject, .resume: .reject, .cancel: .reject,
        .firedCurrent: .ignore, .firedStale: .ignore, .armedCurrent: .armed(start: false),
        .armedStale: .armed(start: false), .refusedCurrent: .refused(stopped: false),
        .refusedStale: .refused(stopped: false), .abandon: .nothing,
    ]
    return TableEvent.allCases.filter { !except.contains($0) }.map { .init(start, $0, unchangedEffect[$0]!, state) }
}

/// The machine's own table: the public rows of `TimerContract` (checked against it below)
/// with the arming steps, arming ids and generations behind them; every row not listed
/// leaves the state unchanged.
private let transitions: [Transition] =
    [
        .init(.idle, .schedule, .arm(replacement, generation: 1, disarming: nil), .running(replacement, arming: nil))
    ] + unchanged(.idle, .idle, except: [.schedule])
    + [
        .init(
            .arming, .reschedule, .arm(replacement, generation: 2, disarming: nil), .running(replacement, arming: nil)),
        .init(.arming, .suspend, .disarm(nil), .suspended(oneShot)),
        .init(.arming, .cancel, .disarm(nil), .cancelled),
        .init(.arming, .armedCurrent, .armed(start: true), .running(oneShot, arming: armingID(2))),
        .init(.arming, .refusedCurrent, .refused(stopped: true), .idle),
        .init(.arming, .abandon, .nothing, .cancelled),
    ]
    + unchanged(
        .arming, .running(oneShot, arming: nil),
        except: [.reschedule, .suspend, .cancel, .armedCurrent, .refusedCurrent, .abandon])
    + [
        .init(
            .runningOneShot, .reschedule, .arm(replacement, generation: 2, disarming: armingID(1)),
            .running(replacement, arming: nil)),
        .init(.runningOneShot, .suspend, .disarm(armingID(1)), .suspended(oneShot)),
        .init(.runningOneShot, .cancel, .disarm(armingID(1)), .cancelled),
        .init(.runningOneShot, .firedCurrent, .runHandler, .idle),
        .init(.runningOneShot, .refusedCurrent, .refused(stopped: true), .idle),
        .init(.runningOneShot, .abandon, .nothing, .cancelled),
    ]
    + unchanged(
        .runningOneShot, .running(oneShot, arming: armingID(1)),
        except: [.reschedule, .suspend, .cancel, .firedCurrent, .refusedCurrent, .abandon])
    + [
        .init(
            .runningRepeating, .reschedule, .arm(replacement, generation: 2, disarming: armingID(1)),
            .running(replacement, arming: nil)),
        .init(.runningRepeating, .suspend, .disarm(armingID(1)), .suspended(repeating)),
        .init(.runningRepeating, .cancel, .disarm(armingID(1)), .cancelled),
        .init(.runningRepeating, .firedCurrent, .runHandler, .running(repeating, arming: armingID(1))),
        .init(.runningRepeating, .refusedCurrent, .refused(stopped: true), .idle),
        .init(.runningRepeating, .abandon, .nothing, .cancelled),
    ]
    + unchanged(
        .runningRepeating, .running(repeating, arming: armingID(1)),
        except: [.reschedule, .suspend, .cancel, .firedCurrent, .refusedCurrent, .abandon])
    + [
        .init(.suspended, .reschedule, .keepSuspended, .suspended(replacement)),
        .init(
            .suspended, .resume, .arm(resumedRepeating, generation: 2, disarming: nil),
            .running(resumedRepeating, arming: nil)),
        .init(.suspended, .cancel, .acknowledge, .cancelled),
    ] + unchanged(.suspended, .suspended(repeating), except: [.reschedule, .resume, .cancel])
    + [
        .init(
            .cancelled, .schedule, .arm(replacement, generation: 2, disarming: nil), .running(replacement, arming: nil))
    ] + unchanged(.cancelled, .cancelled, except: [.schedule])

@Suite struct TimerStateMachineTests {
    @Test func transitionTableCoversEveryStateAndEvent() {
        let covered = transitions.map { "\($0.start.rawValue) + \($0.event.rawValue)" }
        let all = StartState.allCases.flatMap { start in
            TableEvent.allCases.map { "\(start.rawValue) + \($0.rawValue)" }
        }
        #expect(covered.sorted() == all.sorted())
    }

    @Test(arguments: transitions)
    func transition(_ row: Transition) {
        var machine = row.start.make()
        let effect = row.event.apply(to: &machine)
        #expect(effect == row.effect)
        #expect(machine.state == row.end)
    }

    /// The public contract, held against the machine: every row of `TimerContract` for a
    /// state the machine can start from gives the same answer and the same public state.
    @Test(arguments: [StartState.idle, .runningOneShot, .runningRepeating, .suspended, .cancelled])
    func machineFollowsTheContract(_ start: StartState) {
        for operation in TimerContract.Operation.allCases {
            let event: TableEvent
            switch operation {
            case .schedule: event = .schedule
            case .reschedule: event = .reschedule
            case .suspend: event = .suspend
            case .resume: event = .resume
            case .cancel: event = .cancel
            // A running timer reaches only the deadlines of its own kind of schedule.
            case .oneShotFires where start == .runningRepeating, .repeatingFires where start == .runningOneShot:
                continue
            case .oneShotFires, .repeatingFires: event = .firedCurrent
            }
            var machine = start.make()
            let before = machine.state.public
            let effect = event.apply(to: &machine)
            let expected = TimerContract.outcome(of: operation, in: before)
            #expect(![.reject, .ignore].contains(effect) == expected.accepted, "\(start.rawValue) + \(operation)")
            #expect(machine.state.public == expected.state, "\(start.rawValue) + \(operation)")
        }
    }

    @Test func generationsStrictlyIncreaseAcrossArmings() {
        var machine = TimerStateMachine()
        var seen: [UInt64] = []
        func record(_ arm: TimerStateMachine.Arm?) {
            guard let arm else {
                Issue.record("not armed")
                return
            }
            seen.append(arm.generation)
            #expect(machine.armed(generation: arm.generation, arming: armingID(arm.generation)) == true)
        }
        record(machine.schedule(repeating).arm)
        record(machine.reschedule(oneShot).arm)
        #expect(machine.suspend() == .disarm(armingID(2)))
        #expect(machine.reschedule(repeating) == .keepSuspended)
        record(machine.resume(now: 0).arm)
        #expect(machine.cancel() == .disarm(armingID(3)))
        record(machine.schedule(oneShot).arm)
        #expect(machine.fired(arming: armingID(4), scheduled: 1_000) == .runHandler)
        record(machine.schedule(oneShot).arm)
        #expect(seen == [1, 2, 3, 4, 5])
    }

    enum Interruption: String, CaseIterable, Sendable {
        case suspendResume, reschedule, cancelSchedule
    }

    /// A firing in flight across any transition that re-arms is stale: only the new
    /// arming's firings run the handler.
    @Test(arguments: Interruption.allCases)
    func fireFromBeforeAnInterruptionIsStale(_ interruption: Interruption) throws {
        var machine = TimerStateMachine()
        let first = try #require(machine.schedule(repeating).arm)
        #expect(machine.armed(generation: first.generation, arming: 1) == true)
        let second: TimerStateMachine.Arm?
        switch interruption {
        case .suspendResume:
            _ = machine.suspend()
            second = machine.resume(now: resumeTime).arm
        case .reschedule:
            second = machine.reschedule(repeating).arm
        case .cancelSchedule:
            _ = machine.cancel()
            second = machine.schedule(repeating).arm
        }
        let arm = try #require(second)
        #expect(machine.armed(generation: arm.generation, arming: 2) == true)
        #expect(machine.fired(arming: 1, scheduled: 1_300) == .ignore)
        #expect(machine.fired(arming: 2, scheduled: 1_300) == .runHandler)
    }

    /// The arming of an overtaken transition is never started, and its refusal changes
    /// nothing: the transition that overtook it owns the timer.
    @Test(arguments: Interruption.allCases)
    func anOvertakenArmingIsDiscarded(_ interruption: Interruption) throws {
        var machine = TimerStateMachine()
        let first = try #require(machine.schedule(repeating).arm)
        switch interruption {
        case .suspendResume:
            _ = machine.suspend()
            _ = machine.resume(now: resumeTime)
        case .reschedule:
            _ = machine.reschedule(oneShot)
        case .cancelSchedule:
            _ = machine.cancel()
            _ = machine.schedule(oneShot)
        }
        let state = machine.state
        #expect(machine.armed(generation: first.generation, arming: 1) == false)
        #expect(machine.refused(generation: first.generation) == false)
        #expect(machine.state == state)
    }

    /// A refused schedule does nothing; a refused reschedule or resume, whose previous
    /// arming is gone, leaves the timer cancelled.
    @Test func aRefusalLeavesTheStateTheArmingFound() throws {
        var fromCancelled = StartState.cancelled.make()
        let schedule = try #require(fromCancelled.schedule(oneShot).arm)
        #expect(fromCancelled.refused(generation: schedule.generation) == true)
        #expect(fromCancelled.state == .cancelled)

        var rescheduled = StartState.runningRepeating.make()
        let reschedule = try #require(rescheduled.reschedule(oneShot).arm)
        #expect(rescheduled.armed(generation: reschedule.generation, arming: 7) == true)
        #expect(rescheduled.refused(generation: reschedule.generation) == true)
        #expect(rescheduled.state == .cancelled)

        var resumed = StartState.suspended.make()
        let resume = try #require(resumed.resume(now: 0).arm)
        #expect(resumed.refused(generation: resume.generation) == true)
        #expect(resumed.state == .cancelled)
    }

    /// A one-shot that fired leaves its arming with the seam: the next schedule disarms it
    /// first, and so does closing the timer; nothing else is left to disarm afterwards.
    @Test func aFiredOneShotsArmingIsDisarmedByTheNextScheduleOrTheClose() {
        var rescheduled = StartState.runningOneShot.make()
        #expect(rescheduled.fired(arming: armingID(1), scheduled: 1_000) == .runHandler)
        #expect(rescheduled.cancel() == .reject)
        #expect(rescheduled.schedule(oneShot).arm?.disarming == armingID(1))

        var closed = StartState.runningOneShot.make()
        #expect(closed.fired(arming: armingID(1), scheduled: 1_000) == .runHandler)
        #expect(closed.close() == .disarm(armingID(1)))
        #expect(closed.close() == .reject)
        #expect(closed.state == .idle)
    }

    /// Closing acts as a cancel and then refuses every schedule, so a close from another
    /// thread wins whether it comes before or after the owner's arming.
    @Test(arguments: StartState.allCases)
    func aClosedTimerNeverArmsAgain(_ start: StartState) {
        var closed = start.make()
        var cancelled = start.make()
        #expect(closed.close() == cancelled.cancel())
        #expect(closed.state == cancelled.state)
        #expect(closed.schedule(oneShot) == .reject)
        #expect(closed.state == cancelled.state)
    }

    @Test(arguments: [
        (now: Int64(0), deadline: Int64(1_000)),
        (now: 999, deadline: 1_000),
        (now: 1_000, deadline: 1_100),
        (now: 1_001, deadline: 1_100),
        (now: 1_250, deadline: 1_300),
        (now: 1_300, deadline: 1_400),
        (now: 1_301, deadline: 1_400),
    ])
    func resumeOfRepeatingTimerKeepsThePhase(now: Int64, deadline: Int64) throws {
        var machine = StartState.suspended.make()
        let expected = try #require(
            TimerSchedule(deadlineNanoseconds: deadline, periodNanoseconds: 100, leewayNanoseconds: 10)
        )
        #expect(machine.resume(now: now) == .arm(TimerStateMachine.Arm(schedule: expected, generation: 2)))
        #expect(machine.state == .running(expected, arming: nil))
    }

    /// The race the stress run caught: a resume that read its clock before a tick was
    /// delivered, then found the timer suspended after that tick, must not arm the
    /// delivered deadline again.
    @Test(arguments: [
        (delivered: Int64(1_000), staleNow: Int64(990), deadline: Int64(1_100)),
        (delivered: 1_000, staleNow: 1_000, deadline: 1_100),
        (delivered: 1_200, staleNow: 1_150, deadline: 1_300),
        (delivered: 1_200, staleNow: 1_250, deadline: 1_300),
    ])
    func resumeNeverRepeatsADeliveredDeadline(delivered: Int64, staleNow: Int64, deadline: Int64) throws {
        var machine = StartState.runningRepeating.make()
        #expect(machine.fired(arming: armingID(1), scheduled: delivered) == .runHandler)
        _ = machine.suspend()
        let expected = try #require(
            TimerSchedule(deadlineNanoseconds: deadline, periodNanoseconds: 100, leewayNanoseconds: 10)
        )
        #expect(machine.resume(now: staleNow).arm?.schedule == expected)
    }

    @Test func aNewScheduleForgetsTheDeliveredDeadline() throws {
        var machine = StartState.runningRepeating.make()
        _ = machine.fired(arming: armingID(1), scheduled: 1_500)
        _ = machine.reschedule(repeating)
        _ = machine.suspend()
        #expect(machine.resume(now: 0).arm?.schedule == repeating)
    }

    /// A one-shot moved later keeps its arming: the reschedule asks nothing of the seam,
    /// the old deadline's firing arms the rest under a new generation instead of running
    /// the handler, and only the new deadline's firing runs it.
    @Test func aOneShotMovedLaterKeepsItsArmingUntilTheOldDeadline() throws {
        let later = try #require(TimerSchedule(deadlineNanoseconds: 2_000, leewayNanoseconds: 10))
        let latest = try #require(TimerSchedule(deadlineNanoseconds: 3_000, leewayNanoseconds: 20))
        var machine = StartState.runningOneShot.make()
        #expect(machine.reschedule(later, canKeepArming: true) == .keepArmed)
        #expect(machine.reschedule(latest, canKeepArming: true) == .keepArmed)
        #expect(machine.state == .running(latest, arming: armingID(1)))

        let rest = TimerStateMachine.Arm(schedule: latest, generation: 2, disarming: armingID(1))
        #expect(machine.fired(arming: armingID(1), scheduled: 1_000) == .arm(rest))
        #expect(machine.state == .running(latest, arming: nil))
        #expect(machine.fired(arming: armingID(1), scheduled: 1_000) == .ignore)
        #expect(machine.armed(generation: 2, arming: armingID(2)) == true)
        #expect(machine.fired(arming: armingID(2), scheduled: 3_000) == .runHandler)
        #expect(machine.state == .idle)
    }

    /// Only a one-shot whose window neither opens nor closes earlier keeps its arming, only
    /// once the seam has named it, and only on a seam that refuses nothing but after it
    /// stopped; every other reschedule arms anew at once.
    @Test(arguments: [
        (start: StartState.runningOneShot, deadline: Int64(999), period: Int64?.none, leeway: Int64(10)),
        (start: .runningOneShot, deadline: 2_000, period: nil, leeway: 9),
        (start: .runningOneShot, deadline: 2_000, period: 100, leeway: 10),
        (start: .runningRepeating, deadline: 2_000, period: nil, leeway: 10),
        (start: .arming, deadline: 2_000, period: nil, leeway: 10),
    ])
    func aRescheduleThatCouldFireLateArmsAtOnce(start: StartState, deadline: Int64, period: Int64?, leeway: Int64)
        throws
    {
        let next = try #require(
            TimerSchedule(deadlineNanoseconds: deadline, periodNanoseconds: period, leewayNanoseconds: leeway))
        var machine = start.make()
        #expect(machine.reschedule(next, canKeepArming: true).arm?.schedule == next)
        #expect(machine.state == .running(next, arming: nil))
    }

    /// A backend may report a deadline a little before the one it was given (rounded, or
    /// converted through another clock type): unless the arming was kept, its firing runs
    /// the handler rather than re-arming again and again.
    @Test func onlyAKeptArmingsEarlyFiringReArms() throws {
        var machine = StartState.runningOneShot.make()
        #expect(machine.fired(arming: armingID(1), scheduled: 999) == .runHandler)

        let later = try #require(TimerSchedule(deadlineNanoseconds: 2_000, leewayNanoseconds: 10))
        var kept = StartState.runningOneShot.make()
        #expect(kept.reschedule(later, canKeepArming: true) == .keepArmed)
        let rest = try #require(kept.fired(arming: armingID(1), scheduled: 1_000).arm)
        #expect(kept.armed(generation: rest.generation, arming: armingID(2)) == true)
        #expect(kept.fired(arming: armingID(2), scheduled: 1_999) == .runHandler)
    }

    @Test func aSeamThatMayRefuseAnyArmingGetsEveryMoveAtOnce() throws {
        let later = try #require(TimerSchedule(deadlineNanoseconds: 2_000, leewayNanoseconds: 10))
        var machine = StartState.runningOneShot.make()
        #expect(machine.reschedule(later, canKeepArming: false).arm?.disarming == armingID(1))
    }

    /// Whatever follows a kept arming treats it as the current one: a cancel or suspend
    /// disarms it, after which its firing is stale, and a refused start cancels the timer,
    /// since the reschedule had already been accepted.
    @Test func aKeptArmingIsTheOneLaterTransitionsStop() throws {
        let later = try #require(TimerSchedule(deadlineNanoseconds: 2_000, leewayNanoseconds: 10))
        var cancelled = StartState.runningOneShot.make()
        #expect(cancelled.reschedule(later, canKeepArming: true) == .keepArmed)
        #expect(cancelled.cancel() == .disarm(armingID(1)))
        #expect(cancelled.fired(arming: armingID(1), scheduled: 1_000) == .ignore)

        var suspended = StartState.runningOneShot.make()
        #expect(suspended.reschedule(later, canKeepArming: true) == .keepArmed)
        #expect(suspended.suspend() == .disarm(armingID(1)))
        #expect(suspended.resume(now: 1_500).arm?.schedule == later)

        var refused = TimerStateMachine()
        let first = try #require(refused.schedule(oneShot).arm)
        #expect(refused.armed(generation: first.generation, arming: armingID(1)) == true)
        #expect(refused.reschedule(later, canKeepArming: true) == .keepArmed)
        #expect(refused.refused(generation: first.generation) == true)
        #expect(refused.state == .cancelled)
    }

    @Test func resumeOfOneShotWithPassedDeadlineKeepsIt() {
        var machine = StartState.runningOneShot.make()
        _ = machine.suspend()
        #expect(machine.resume(now: 50_000).arm?.schedule == oneShot)
    }
}

extension TimerStateMachine.ScheduleAction {
    var arm: TimerStateMachine.Arm? {
        guard case .arm(let arm) = self else { return nil }
        return arm
    }
}

extension TimerStateMachine.RescheduleAction {
    var arm: TimerStateMachine.Arm? {
        guard case .arm(let arm) = self else { return nil }
        return arm
    }
}

extension TimerStateMachine.FiredAction {
    var arm: TimerStateMachine.Arm? {
        guard case .arm(let arm) = self else { return nil }
        return arm
    }
}

extension TimerStateMachine.ResumeAction {
    var arm: TimerStateMachine.Arm? {
        guard case .arm(let arm) = self else { return nil }
        return arm
    }
}

// MARK: - TimerSchedule

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

// MARK: - Randomized comparison with a reference model

/// Where the model says the timer is.
enum Phase: Equatable {
    case idle
    case running(repeating: Bool, arming: UInt64?)
    case suspended(repeating: Bool)
    case cancelled

    init(_ state: TimerStateMachine.State) {
        switch state {
        case .idle: self = .idle
        case .running(let schedule, let arming): self = .running(repeating: schedule.isRepeating, arming: arming)
        case .suspended(let schedule): self = .suspended(repeating: schedule.isRepeating)
        case .cancelled: self = .cancelled
        }
    }
}

enum RandomEvent {
    case schedule(TimerSchedule)
    case reschedule(TimerSchedule, canKeepArming: Bool)
    case suspend
    case resume(now: Int64)
    case cancel
    case armed(generation: UInt64, arming: UInt64)
    case refused(generation: UInt64)
    case fired(arming: UInt64, scheduled: Int64)
    case abandon
}

/// What the model predicts: an action without its schedule.
enum Outcome: Equatable {
    case arm(generation: UInt64, disarming: UInt64?)
    case disarm(UInt64?)
    case armed(start: Bool)
    case refused(stopped: Bool)
    case keepSuspended, keepArmed, acknowledge, runHandler, ignore, reject, nothing

    init(_ effect: Effect) {
        switch effect {
        case .arm(_, let generation, let previous): self = .arm(generation: generation, disarming: previous)
        case .disarm(let arming): self = .disarm(arming)
        case .armed(let start): self = .armed(start: start)
        case .refused(let stopped): self = .refused(stopped: stopped)
        case .keepSuspended: self = .keepSuspended
        case .keepArmed: self = .keepArmed
        case .acknowledge: self = .acknowledge
        case .runHandler: self = .runHandler
        case .ignore: self = .ignore
        case .reject: self = .reject
        case .nothing: self = .nothing
        }
    }
}

/// The rules written a second time, as plainly as possible.
struct ReferenceModel {
    var phase = Phase.idle
    var lastGeneration: UInt64 = 0
    var fallback = Phase.cancelled
    /// A fired one-shot's arming, which the next schedule disarms.
    var spent: UInt64?
    /// The last schedule given, which a running or suspended timer follows.
    var schedule: TimerSchedule?
    /// The running arming was kept by a later reschedule.
    var kept = false

    mutating func apply(_ event: RandomEvent) -> Outcome {
        switch (event, self.phase) {
        case (.schedule(let schedule), .idle), (.schedule(let schedule), .cancelled):
            self.fallback = self.phase
            self.schedule = schedule
            defer { self.spent = nil }
            return self.arm(repeating: schedule.isRepeating, disarming: self.spent)
        case (.reschedule(let next, true), .running(false, _?))
        where !next.isRepeating && next.deadlineNanoseconds >= self.schedule!.deadlineNanoseconds
            && next.leewayNanoseconds >= self.schedule!.leewayNanoseconds:
            self.fallback = .cancelled
            self.schedule = next
            self.kept = true
            return .keepArmed
        case (.reschedule(let schedule, _), .running(_, let arming)):
            self.fallback = .cancelled
            self.schedule = schedule
            return self.arm(repeating: schedule.isRepeating, disarming: arming)
        case (.reschedule(let schedule, _), .suspended):
            self.phase = .suspended(repeating: schedule.isRepeating)
            self.schedule = schedule
            return .keepSuspended
        case (.suspend, .running(let repeating, let arming)):
            self.phase = .suspended(repeating: repeating)
            return .disarm(arming)
        case (.resume, .suspended(let repeating)):
            self.fallback = .cancelled
            return self.arm(repeating: repeating, disarming: nil)
        case (.cancel, .running(_, let arming)):
            self.phase = .cancelled
            return .disarm(arming)
        case (.cancel, .suspended):
            self.phase = .cancelled
            return .acknowledge
        case (.armed(let generation, let arming), .running(let repeating, nil)) where generation == self.lastGeneration:
            self.phase = .running(repeating: repeating, arming: arming)
            return .armed(start: true)
        case (.armed, _):
            return .armed(start: false)
        case (.refused(let generation), .running) where generation == self.lastGeneration:
            self.phase = self.fallback
            return .refused(stopped: true)
        case (.refused, _):
            return .refused(stopped: false)
        case (.fired(let arming, let scheduled), .running(false, let current?))
        where arming == current && self.kept && scheduled < self.schedule!.deadlineNanoseconds:
            return self.arm(repeating: false, disarming: arming)
        case (.fired(let arming, _), .running(let repeating, let current?)) where arming == current:
            if !repeating { (self.phase, self.spent) = (.idle, arming) }
            return .runHandler
        case (.fired, _):
            return .ignore
        case (.abandon, .running):
            self.phase = .cancelled
            return .nothing
        case (.abandon, _):
            return .nothing
        case (.schedule, _), (.reschedule, _), (.suspend, _), (.resume, _), (.cancel, _):
            return .reject
        }
    }

    private mutating func arm(repeating: Bool, disarming: UInt64?) -> Outcome {
        self.lastGeneration += 1
        self.kept = false
        self.phase = .running(repeating: repeating, arming: nil)
        return .arm(generation: self.lastGeneration, disarming: disarming)
    }
}

extension TimerStateMachine {
    mutating func apply(_ event: RandomEvent) -> Effect {
        switch event {
        case .schedule(let schedule): self.schedule(schedule).effect
        case .reschedule(let schedule, let canKeep): self.reschedule(schedule, canKeepArming: canKeep).effect
        case .suspend: self.suspend().effect
        case .resume(let now): self.resume(now: now).effect
        case .cancel: self.cancel().effect
        case .armed(let generation, let arming): .armed(start: self.armed(generation: generation, arming: arming))
        case .refused(let generation): .refused(stopped: self.refused(generation: generation))
        case .fired(let arming, let scheduled): self.fired(arming: arming, scheduled: scheduled).effect
        case .abandon: self.abandonEffect()
        }
    }
}

extension SeededGenerator {
    mutating func schedule() -> TimerSchedule {
        let period: Int64? = Bool.random(using: &self) ? Int64.random(in: 1...1_000, using: &self) : nil
        return TimerSchedule(
            deadlineNanoseconds: Int64.random(in: 0...10_000, using: &self),
            periodNanoseconds: period,
            leewayNanoseconds: Int64.random(in: 0...2_000, using: &self)
        )!
    }

    /// Arming reports mostly for the latest generation, sometimes for a stale or a future
    /// one; firings mostly for the latest arming ids.
    mutating func event(lastGeneration: UInt64) -> RandomEvent {
        let generation = lastGeneration &+ UInt64.random(in: 0...3, using: &self) &- 2
        switch Int.random(in: 0..<8, using: &self) {
        case 0: return .schedule(self.schedule())
        case 1: return .reschedule(self.schedule(), canKeepArming: Bool.random(using: &self))
        case 2: return .suspend
        case 3: return .resume(now: Int64.random(in: 0...20_000, using: &self))
        case 4: return .cancel
        case 5: return .armed(generation: generation, arming: generation)
        case 6:
            switch Int.random(in: 0..<8, using: &self) {
            case 0, 1: return .refused(generation: generation)
            case 2: return .abandon
            default: return .cancel
            }
        default: return .fired(arming: generation, scheduled: Int64.random(in: 0...20_000, using: &self))
        }
    }
}

@Suite struct TimerStateMachinePropertyTests {
    @Test(arguments: [UInt64(0), 42, 0xDEAD_BEEF])
    func machineAgreesWithReferenceModel(seed: UInt64) {
        var rng = SeededGenerator(seed: seed)
        var machine = TimerStateMachine()
        var model = ReferenceModel()
        var delivered: Int64?
        for step in 0..<10_000 {
            let event = rng.event(lastGeneration: model.lastGeneration)
            let effect = machine.apply(event)
            let outcome = model.apply(event)
            #expect(Outcome(effect) == outcome, "step \(step): \(event)")
            #expect(Phase(machine.state) == model.phase, "step \(step): \(event)")
            switch (event, effect) {
            case (.schedule(let schedule), .arm(let armed, _, _)),
                (.reschedule(let schedule, _), .arm(let armed, _, _)):
                #expect(armed == schedule)
                delivered = nil
            case (.resume(let now), .arm(let armed, _, _)):
                #expect(armed.deadlineNanoseconds >= now || !armed.isRepeating)
                if armed.isRepeating, let delivered { #expect(armed.deadlineNanoseconds > delivered) }
            case (.fired(_, let scheduled), .runHandler):
                delivered = scheduled
            case (.fired(_, let scheduled), .arm(let armed, _, _)):
                #expect(armed.deadlineNanoseconds > scheduled)
            default:
                break
            }
            if Outcome(effect) != outcome { return }
        }
    }
}
