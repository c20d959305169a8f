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

/// The state a transition-table row starts from.
enum StartState: String, CaseIterable, Hashable, Sendable {
    case idle, runningOneShot, runningRepeating, suspended, cancelled

    func make() -> TimerStateMachine {
        var machine = TimerStateMachine()
        switch self {
        case .idle:
            break
        case .runningOneShot:
            _ = machine.schedule(oneShot)
        case .runningRepeating, .suspended:
            _ = machine.schedule(repeating)
            if self == .suspended { _ = machine.suspend() }
        case .cancelled:
            _ = machine.schedule(oneShot)
            _ = machine.cancel()
        }
        return machine
    }
}

/// An event of a transition-table row, with fixed arguments.
enum TableEvent: String, CaseIterable, Hashable, Sendable {
    case schedule, reschedule, suspend, resume, cancel, close, fired, refused, abandon

    func apply(to machine: inout TimerStateMachine) -> Effect {
        switch self {
        case .schedule: machine.schedule(replacement).effect
        case .reschedule: machine.reschedule(replacement).effect
        case .suspend: machine.suspend().effect
        case .resume: machine.resume(now: resumeTime).effect
        case .cancel: machine.cancel().effect
        case .close: machine.close().effect
        case .fired: machine.fired(scheduled: 1_000).effect
        case .refused: machine.refusedEffect()
        case .abandon: machine.abandonEffect()
        }
    }
}

/// Every action of every event, so one table can hold them all.
enum Effect: Equatable, Sendable {
    case arm(TimerSchedule)
    case keepSuspended, disarm, acknowledge, runHandler, ignore, reject
    /// An event that asks nothing of the owner.
    case nothing
}

extension TimerStateMachine {
    /// ``abandon()`` as a table event.
    mutating func abandonEffect() -> Effect {
        self.abandon()
        return .nothing
    }

    /// ``refused()`` as a table event: the owner reports it only for a running timer, whose
    /// arming it was making.
    mutating func refusedEffect() -> Effect {
        guard case .running = self.state else { return .nothing }
        self.refused()
        return .nothing
    }
}

extension TimerStateMachine.ScheduleAction {
    var effect: Effect {
        switch self {
        case .arm(let schedule): .arm(schedule)
        case .reject: .reject
        }
    }
}

extension TimerStateMachine.RescheduleAction {
    var effect: Effect {
        switch self {
        case .arm(let schedule): .arm(schedule)
        case .keepSuspended: .keepSuspended
        case .reject: .reject
        }
    }
}

extension TimerStateMachine.StopAction {
    var effect: Effect {
        switch self {
        case .disarm: .disarm
        case .acknowledge: .acknowledge
        case .reject: .reject
        }
    }
}

extension TimerStateMachine.ResumeAction {
    var effect: Effect {
        switch self {
        case .arm(let schedule): .arm(schedule)
        case .reject: .reject
        }
    }
}

extension TimerStateMachine.FiredAction {
    var effect: Effect {
        switch self {
        case .runHandler: .runHandler
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

/// Rows for the events a state does not accept, with the state unchanged.
private func unchanged(_ start: StartState, _ state: TimerStateMachine.State, except: Set<TableEvent>) -> [Transition] {
    let unchangedEffect: [TableEvent: Effect] = [
        .schedule: .reject, .reschedule: .reject, .suspend: .reject, .resume: .reject, .cancel: .reject,
        .close: .reject, .fired: .ignore, .refused: .nothing, .abandon: .nothing,
    ]
    return TableEvent.allCases.filter { !except.contains($0) }.map { .init(start, $0, unchangedEffect[$0]!, state) }
}

/// The machine's own table: the public rows of `TimerContract` (checked against it below)
/// and the events only the owner reports; every row not listed leaves the state unchanged.
private let transitions: [Transition] =
    [.init(.idle, .schedule, .arm(replacement), .running(replacement))]
    + unchanged(.idle, .idle, except: [.schedule])
    + [
        .init(.runningOneShot, .reschedule, .arm(replacement), .running(replacement)),
        .init(.runningOneShot, .suspend, .disarm, .suspended(oneShot)),
        .init(.runningOneShot, .cancel, .disarm, .cancelled),
        .init(.runningOneShot, .close, .disarm, .cancelled),
        .init(.runningOneShot, .fired, .runHandler, .idle),
        .init(.runningOneShot, .refused, .nothing, .idle),
        .init(.runningOneShot, .abandon, .nothing, .cancelled),
    ]
    + unchanged(
        .runningOneShot, .running(oneShot),
        except: [.reschedule, .suspend, .cancel, .close, .fired, .refused, .abandon])
    + [
        .init(.runningRepeating, .reschedule, .arm(replacement), .running(replacement)),
        .init(.runningRepeating, .suspend, .disarm, .suspended(repeating)),
        .init(.runningRepeating, .cancel, .disarm, .cancelled),
        .init(.runningRepeating, .close, .disarm, .cancelled),
        .init(.runningRepeating, .fired, .runHandler, .running(repeating)),
        .init(.runningRepeating, .refused, .nothing, .idle),
        .init(.runningRepeating, .abandon, .nothing, .cancelled),
    ]
    + unchanged(
        .runningRepeating, .running(repeating),
        except: [.reschedule, .suspend, .cancel, .close, .fired, .refused, .abandon])
    + [
        .init(.suspended, .reschedule, .keepSuspended, .suspended(replacement)),
        .init(.suspended, .resume, .arm(resumedRepeating), .running(resumedRepeating)),
        .init(.suspended, .cancel, .acknowledge, .cancelled),
        .init(.suspended, .close, .acknowledge, .cancelled),
    ] + unchanged(.suspended, .suspended(repeating), except: [.reschedule, .resume, .cancel, .close])
    + [.init(.cancelled, .schedule, .arm(replacement), .running(replacement))]
    + unchanged(.cancelled, .cancelled, except: [.schedule])

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

    /// The public contract, held against the machine: every row of `TimerContract` gives
    /// the same answer and the same public state.
    @Test(arguments: StartState.allCases)
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
            case .oneShotFires, .repeatingFires: event = .fired
            }
            var machine = start.make()
            let before = machine.state.public
            let effect = event.apply(to: &machine)
            let expected = TimerContract.outcome(of: operation, in: before)
            #expect(![.reject, .ignore].contains(effect) == expected.accepted, "\(start.rawValue) + \(operation)")
            #expect(machine.state.public == expected.state, "\(start.rawValue) + \(operation)")
        }
    }

    /// A refused schedule does nothing; a refused reschedule or resume, whose previous
    /// arming is gone, leaves the timer cancelled.
    @Test func aRefusalLeavesTheStateTheArmingFound() {
        var fromIdle = TimerStateMachine()
        #expect(fromIdle.schedule(oneShot) == .arm(oneShot))
        fromIdle.refused()
        #expect(fromIdle.state == .idle)

        var fromCancelled = StartState.cancelled.make()
        #expect(fromCancelled.schedule(oneShot) == .arm(oneShot))
        fromCancelled.refused()
        #expect(fromCancelled.state == .cancelled)

        var rescheduled = StartState.runningRepeating.make()
        #expect(rescheduled.reschedule(oneShot) == .arm(oneShot))
        rescheduled.refused()
        #expect(rescheduled.state == .cancelled)

        var resumed = StartState.suspended.make()
        #expect(resumed.resume(now: 0) == .arm(repeating))
        resumed.refused()
        #expect(resumed.state == .cancelled)
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
        #expect(machine.resume(now: now) == .arm(expected))
        #expect(machine.state == .running(expected))
    }

    /// A resume that read its clock before a tick was delivered, then found the timer
    /// suspended after that tick, must not arm the delivered deadline again.
    @Test(arguments: [
        (delivered: Int64(1_000), staleNow: Int64(990), deadline: Int64(1_100)),
        (delivered: 1_000, staleNow: 1_000, deadline: 1_100),
        (delivered: 1_200, staleNow: 1_150, deadline: 1_300),
        (delivered: 1_200, staleNow: 1_250, deadline: 1_300),
    ])
    func resumeNeverRepeatsADeliveredDeadline(delivered: Int64, staleNow: Int64, deadline: Int64) throws {
        var machine = StartState.runningRepeating.make()
        #expect(machine.fired(scheduled: delivered) == .runHandler)
        _ = machine.suspend()
        let expected = try #require(
            TimerSchedule(deadlineNanoseconds: deadline, periodNanoseconds: 100, leewayNanoseconds: 10)
        )
        #expect(machine.resume(now: staleNow) == .arm(expected))
    }

    @Test func aNewScheduleForgetsTheDeliveredDeadline() {
        var machine = StartState.runningRepeating.make()
        _ = machine.fired(scheduled: 1_500)
        _ = machine.reschedule(repeating)
        _ = machine.suspend()
        #expect(machine.resume(now: 0) == .arm(repeating))
    }

    /// A backend may report a deadline a little before the one it was given (rounded, or
    /// converted through another clock type): the firing runs the handler all the same.
    @Test func aFiringRunsTheHandlerWhateverDeadlineItReports() {
        var machine = StartState.runningOneShot.make()
        #expect(machine.fired(scheduled: 999) == .runHandler)
        #expect(machine.state == .idle)
    }

    @Test func resumeOfOneShotWithPassedDeadlineKeepsIt() {
        var machine = StartState.runningOneShot.make()
        _ = machine.suspend()
        #expect(machine.resume(now: 50_000) == .arm(oneShot))
    }
}
