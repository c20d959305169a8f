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

    /// The machine in this state, and the last generation it handed out.
    func make() -> (machine: TimerStateMachine, lastGeneration: UInt64) {
        var machine = TimerStateMachine()
        switch self {
        case .idle:
            return (machine, 0)
        case .runningOneShot:
            _ = machine.schedule(oneShot)
            return (machine, 1)
        case .runningRepeating:
            _ = machine.schedule(repeating)
            return (machine, 1)
        case .suspended:
            _ = machine.schedule(repeating)
            _ = machine.suspend()
            return (machine, 2)
        case .cancelled:
            _ = machine.schedule(oneShot)
            _ = machine.cancel()
            return (machine, 1)
        }
    }
}

/// An event of a transition-table row, with fixed arguments.
enum TableEvent: String, CaseIterable, Hashable, Sendable {
    case schedule, reschedule, suspend, resume, cancel, firedCurrent, firedStale

    func apply(to machine: inout TimerStateMachine, lastGeneration: UInt64) -> Effect {
        switch self {
        case .schedule: machine.schedule(replacement).effect
        case .reschedule: machine.reschedule(replacement).effect
        case .suspend: machine.suspend().effect
        case .resume: machine.resume(now: resumeTime).effect
        case .cancel: machine.cancel().effect
        case .firedCurrent: machine.fired(generation: lastGeneration, scheduled: 1_000).effect
        case .firedStale: machine.fired(generation: lastGeneration &- 1, scheduled: 1_000).effect
        }
    }
}

/// Every action of every event, so one table can hold them all.
enum Effect: Equatable, Sendable {
    case arm(TimerSchedule, generation: UInt64)
    case keepSuspended, disarm, acknowledge, runHandler, ignore, reject
}

extension TimerStateMachine.ScheduleAction {
    var effect: Effect {
        switch self {
        case .arm(let schedule, let generation): .arm(schedule, generation: generation)
        case .reject: .reject
        }
    }
}

extension TimerStateMachine.RescheduleAction {
    var effect: Effect {
        switch self {
        case .arm(let schedule, let generation): .arm(schedule, generation: generation)
        case .keepSuspended: .keepSuspended
        case .reject: .reject
        }
    }
}

extension TimerStateMachine.SuspendAction {
    var effect: Effect {
        switch self {
        case .disarm: .disarm
        case .reject: .reject
        }
    }
}

extension TimerStateMachine.ResumeAction {
    var effect: Effect {
        switch self {
        case .arm(let schedule, let generation): .arm(schedule, generation: generation)
        case .reject: .reject
        }
    }
}

extension TimerStateMachine.CancelAction {
    var effect: Effect {
        switch self {
        case .disarm: .disarm
        case .acknowledge: .acknowledge
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

/// The table in `Metronome.docc/StateMachine.md`, with concrete generations.
private let transitions: [Transition] = [
    .init(.idle, .schedule, .arm(replacement, generation: 1), .running(replacement, generation: 1)),
    .init(.idle, .reschedule, .reject, .idle),
    .init(.idle, .suspend, .reject, .idle),
    .init(.idle, .resume, .reject, .idle),
    .init(.idle, .cancel, .reject, .idle),
    .init(.idle, .firedCurrent, .ignore, .idle),
    .init(.idle, .firedStale, .ignore, .idle),

    .init(.runningOneShot, .schedule, .reject, .running(oneShot, generation: 1)),
    .init(.runningOneShot, .reschedule, .arm(replacement, generation: 2), .running(replacement, generation: 2)),
    .init(.runningOneShot, .suspend, .disarm, .suspended(oneShot, generation: 2)),
    .init(.runningOneShot, .resume, .reject, .running(oneShot, generation: 1)),
    .init(.runningOneShot, .cancel, .disarm, .cancelled),
    .init(.runningOneShot, .firedCurrent, .runHandler, .idle),
    .init(.runningOneShot, .firedStale, .ignore, .running(oneShot, generation: 1)),

    .init(.runningRepeating, .schedule, .reject, .running(repeating, generation: 1)),
    .init(.runningRepeating, .reschedule, .arm(replacement, generation: 2), .running(replacement, generation: 2)),
    .init(.runningRepeating, .suspend, .disarm, .suspended(repeating, generation: 2)),
    .init(.runningRepeating, .resume, .reject, .running(repeating, generation: 1)),
    .init(.runningRepeating, .cancel, .disarm, .cancelled),
    .init(.runningRepeating, .firedCurrent, .runHandler, .running(repeating, generation: 1)),
    .init(.runningRepeating, .firedStale, .ignore, .running(repeating, generation: 1)),

    .init(.suspended, .schedule, .reject, .suspended(repeating, generation: 2)),
    .init(.suspended, .reschedule, .keepSuspended, .suspended(replacement, generation: 3)),
    .init(.suspended, .suspend, .reject, .suspended(repeating, generation: 2)),
    .init(.suspended, .resume, .arm(resumedRepeating, generation: 3), .running(resumedRepeating, generation: 3)),
    .init(.suspended, .cancel, .acknowledge, .cancelled),
    .init(.suspended, .firedCurrent, .ignore, .suspended(repeating, generation: 2)),
    .init(.suspended, .firedStale, .ignore, .suspended(repeating, generation: 2)),

    .init(.cancelled, .schedule, .arm(replacement, generation: 2), .running(replacement, generation: 2)),
    .init(.cancelled, .reschedule, .reject, .cancelled),
    .init(.cancelled, .suspend, .reject, .cancelled),
    .init(.cancelled, .resume, .reject, .cancelled),
    .init(.cancelled, .cancel, .reject, .cancelled),
    .init(.cancelled, .firedCurrent, .ignore, .cancelled),
    .init(.cancelled, .firedStale, .ignore, .cancelled),
]

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
        var (machine, lastGeneration) = row.start.make()
        let effect = row.event.apply(to: &machine, lastGeneration: lastGeneration)
        #expect(effect == row.effect)
        #expect(machine.state == row.end)
    }

    @Test func generationsStrictlyIncreaseAcrossAcceptedTransitions() {
        var machine = TimerStateMachine()
        var seen: [UInt64] = []
        func record(_ accepted: Bool) {
            #expect(accepted)
            if let generation = machine.generation { seen.append(generation) }
        }
        record(machine.schedule(repeating) != .reject)
        record(machine.reschedule(oneShot) != .reject)
        record(machine.suspend() == .disarm)
        record(machine.reschedule(repeating) == .keepSuspended)
        record(machine.resume(now: 0) != .reject)
        record(machine.cancel() == .disarm)
        record(machine.schedule(oneShot) != .reject)
        record(machine.fired(generation: seen.last ?? 0, scheduled: 1_000) == .runHandler)
        record(machine.schedule(oneShot) != .reject)
        #expect(seen.count == 7)
        #expect(zip(seen, seen.dropFirst()).allSatisfy { $0 < $1 })
    }

    @Test func rejectedEventsKeepTheGeneration() {
        var machine = TimerStateMachine()
        _ = machine.schedule(repeating)
        let generation = machine.generation
        #expect(machine.schedule(oneShot) == .reject)
        #expect(machine.resume(now: 0) == .reject)
        #expect(machine.fired(generation: 0, scheduled: 1_000) == .ignore)
        #expect(machine.generation == generation)
        #expect(machine.state == .running(repeating, generation: 1))
    }

    enum Interruption: String, CaseIterable, Sendable {
        case suspendResume, reschedule, cancelSchedule
    }

    @Test(arguments: Interruption.allCases)
    func fireFromBeforeAnInterruptionIsStale(_ interruption: Interruption) throws {
        var machine = TimerStateMachine()
        _ = machine.schedule(repeating)
        let stale = try #require(machine.generation)
        switch interruption {
        case .suspendResume:
            _ = machine.suspend()
            _ = machine.resume(now: resumeTime)
        case .reschedule:
            _ = machine.reschedule(repeating)
        case .cancelSchedule:
            _ = machine.cancel()
            _ = machine.schedule(repeating)
        }
        let current = try #require(machine.generation)
        #expect(current != stale)
        #expect(machine.fired(generation: stale, scheduled: 1_300) == .ignore)
        #expect(machine.fired(generation: current, scheduled: 1_300) == .runHandler)
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
        var machine = TimerStateMachine()
        _ = machine.schedule(repeating)
        _ = machine.suspend()
        let expected = try #require(
            TimerSchedule(deadlineNanoseconds: deadline, periodNanoseconds: 100, leewayNanoseconds: 10)
        )
        #expect(machine.resume(now: now) == .arm(expected, generation: 3))
        #expect(machine.state == .running(expected, generation: 3))
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
        var machine = TimerStateMachine()
        _ = machine.schedule(repeating)
        #expect(machine.fired(generation: 1, scheduled: delivered) == .runHandler)
        _ = machine.suspend()
        let expected = try #require(
            TimerSchedule(deadlineNanoseconds: deadline, periodNanoseconds: 100, leewayNanoseconds: 10)
        )
        #expect(machine.resume(now: staleNow) == .arm(expected, generation: 3))
    }

    @Test func aNewScheduleForgetsTheDeliveredDeadline() throws {
        var machine = TimerStateMachine()
        _ = machine.schedule(repeating)
        _ = machine.fired(generation: 1, scheduled: 1_500)
        _ = machine.reschedule(repeating)
        _ = machine.suspend()
        #expect(machine.resume(now: 0) == .arm(repeating, generation: 4))
    }

    @Test func resumeOfOneShotWithPassedDeadlineKeepsIt() {
        var machine = TimerStateMachine()
        _ = machine.schedule(oneShot)
        _ = machine.suspend()
        #expect(machine.resume(now: 50_000) == .arm(oneShot, generation: 3))
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


/// What the model predicts: an action without its schedule.
enum Outcome: Equatable {
    case arm(generation: UInt64)
    case keepSuspended, disarm, acknowledge, runHandler, ignore, reject

    init(_ effect: Effect) {
        switch effect {
        case .arm(_, let generation): self = .arm(generation: generation)
        case .keepSuspended: self = .keepSuspended
        case .disarm: self = .disarm
        case .acknowledge: self = .acknowledge
        case .runHandler: self = .runHandler
        case .ignore: self = .ignore
        case .reject: self = .reject
        }
    }
}

enum Phase: Equatable {
    case idle
    case running(repeating: Bool)
    case suspended(repeating: Bool)
    case cancelled

    init(_ state: TimerStateMachine.State) {
        switch state {
        case .idle: self = .idle
        case .running(let schedule, _): self = .running(repeating: schedule.isRepeating)
        case .suspended(let schedule, _): self = .suspended(repeating: schedule.isRepeating)
        case .cancelled: self = .cancelled
        }
    }
}

enum RandomEvent {
    case schedule(TimerSchedule)
    case reschedule(TimerSchedule)
    case suspend
    case resume(now: Int64)
    case cancel
    case fired(generation: UInt64, scheduled: Int64)
}

/// The rules written a second time, as plainly as possible.
struct ReferenceModel {
    var phase = Phase.idle
    var lastGeneration: UInt64 = 0
    /// The latest deadline of the current schedule a repeating handler ran for.
    var lastDelivered: Int64?

    var generation: UInt64? {
        switch self.phase {
        case .running, .suspended: self.lastGeneration
        case .idle, .cancelled: nil
        }
    }

    mutating func apply(_ event: RandomEvent) -> Outcome {
        switch (event, self.phase) {
        case (.schedule(let schedule), .idle), (.schedule(let schedule), .cancelled):
            self.lastGeneration += 1
            self.phase = .running(repeating: schedule.isRepeating)
            self.lastDelivered = nil
            return .arm(generation: self.lastGeneration)
        case (.reschedule(let schedule), .running):
            self.lastGeneration += 1
            self.phase = .running(repeating: schedule.isRepeating)
            self.lastDelivered = nil
            return .arm(generation: self.lastGeneration)
        case (.reschedule(let schedule), .suspended):
            self.lastGeneration += 1
            self.phase = .suspended(repeating: schedule.isRepeating)
            self.lastDelivered = nil
            return .keepSuspended
        case (.suspend, .running(let repeating)):
            self.lastGeneration += 1
            self.phase = .suspended(repeating: repeating)
            return .disarm
        case (.resume, .suspended(let repeating)):
            self.lastGeneration += 1
            self.phase = .running(repeating: repeating)
            return .arm(generation: self.lastGeneration)
        case (.cancel, .running):
            self.phase = .cancelled
            return .disarm
        case (.cancel, .suspended):
            self.phase = .cancelled
            return .acknowledge
        case (.fired(let generation, let scheduled), .running(let repeating)) where generation == self.lastGeneration:
            if repeating { self.lastDelivered = scheduled } else { self.phase = .idle }
            return .runHandler
        case (.fired, _):
            return .ignore
        case (.schedule, _), (.reschedule, _), (.suspend, _), (.resume, _), (.cancel, _):
            return .reject
        }
    }
}

extension TimerStateMachine {
    mutating func apply(_ event: RandomEvent) -> Effect {
        switch event {
        case .schedule(let schedule): self.schedule(schedule).effect
        case .reschedule(let schedule): self.reschedule(schedule).effect
        case .suspend: self.suspend().effect
        case .resume(let now): self.resume(now: now).effect
        case .cancel: self.cancel().effect
        case .fired(let generation, let scheduled): self.fired(generation: generation, scheduled: scheduled).effect
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

    mutating func event(lastGeneration: UInt64) -> RandomEvent {
        switch Int.random(in: 0..<6, using: &self) {
        case 0: .schedule(self.schedule())
        case 1: .reschedule(self.schedule())
        case 2: .suspend
        case 3: .resume(now: Int64.random(in: 0...20_000, using: &self))
        case 4: .cancel
        // Mostly the current generation, sometimes a stale or a future one.
        default:
            .fired(
                generation: lastGeneration &+ UInt64.random(in: 0...3, using: &self) &- 2,
                scheduled: Int64.random(in: 0...20_000, using: &self)
            )
        }
    }
}

@Suite struct TimerStateMachinePropertyTests {
    @Test(arguments: [UInt64(0), 42, 0xDEAD_BEEF])
    func machineAgreesWithReferenceModel(seed: UInt64) {
        var rng = SeededGenerator(seed: seed)
        var machine = TimerStateMachine()
        var model = ReferenceModel()
        for step in 0..<10_000 {
            let event = rng.event(lastGeneration: model.lastGeneration)
            let delivered = model.lastDelivered
            let effect = machine.apply(event)
            let outcome = model.apply(event)
            #expect(Outcome(effect) == outcome, "step \(step): \(event)")
            #expect(Phase(machine.state) == model.phase, "step \(step): \(event)")
            #expect(machine.generation == model.generation, "step \(step): \(event)")
            if case .arm(let armed, _) = effect {
                switch event {
                case .schedule(let schedule), .reschedule(let schedule):
                    #expect(armed == schedule)
                case .resume(let now):
                    #expect(armed.deadlineNanoseconds >= now || !armed.isRepeating)
                    if armed.isRepeating, let delivered {
                        #expect(armed.deadlineNanoseconds > delivered)
                    }
                case .suspend, .cancel, .fired:
                    Issue.record("step \(step): \(event) cannot arm")
                }
            }
            if Outcome(effect) != outcome { return }
        }
    }
}
