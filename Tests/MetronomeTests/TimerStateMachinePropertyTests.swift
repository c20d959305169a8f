import Testing

@testable import Metronome

/// Where the model says the timer is.
enum Phase: Equatable {
    case idle
    case running(repeating: Bool)
    case suspended(repeating: Bool)
    case cancelled

    init(_ state: TimerStateMachine.State) {
        switch state {
        case .idle: self = .idle
        case .running(let schedule): self = .running(repeating: schedule.isRepeating)
        case .suspended(let schedule): self = .suspended(repeating: schedule.isRepeating)
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
    case close
    case refused
    case fired(scheduled: Int64)
    case abandon
}

/// What the model predicts: an action without its schedule.
enum Outcome: Equatable {
    case arm, keepSuspended, disarm, acknowledge, runHandler, ignore, reject, nothing

    init(_ effect: Effect) {
        switch effect {
        case .arm: self = .arm
        case .keepSuspended: self = .keepSuspended
        case .disarm: self = .disarm
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
    var fallback = Phase.cancelled
    var closed = false

    mutating func apply(_ event: RandomEvent) -> Outcome {
        switch (event, self.phase) {
        case (.schedule(let schedule), .idle) where !self.closed,
            (.schedule(let schedule), .cancelled) where !self.closed:
            self.fallback = self.phase
            self.phase = .running(repeating: schedule.isRepeating)
            return .arm
        case (.reschedule(let schedule), .running):
            self.fallback = .cancelled
            self.phase = .running(repeating: schedule.isRepeating)
            return .arm
        case (.reschedule(let schedule), .suspended):
            self.phase = .suspended(repeating: schedule.isRepeating)
            return .keepSuspended
        case (.suspend, .running(let repeating)):
            self.phase = .suspended(repeating: repeating)
            return .disarm
        case (.resume, .suspended(let repeating)):
            self.fallback = .cancelled
            self.phase = .running(repeating: repeating)
            return .arm
        case (.cancel, .running), (.close, .running):
            self.closed = self.closed || event.isClose
            self.phase = .cancelled
            return .disarm
        case (.cancel, .suspended), (.close, .suspended):
            self.closed = self.closed || event.isClose
            self.phase = .cancelled
            return .acknowledge
        case (.close, _):
            self.closed = true
            return .reject
        case (.refused, .running):
            self.phase = self.fallback
            return .nothing
        case (.fired, .running(let repeating)):
            if !repeating { self.phase = .idle }
            return .runHandler
        case (.fired, _):
            return .ignore
        case (.abandon, .running):
            self.phase = .cancelled
            return .nothing
        case (.abandon, _), (.refused, _):
            return .nothing
        case (.schedule, _), (.reschedule, _), (.suspend, _), (.resume, _), (.cancel, _):
            return .reject
        }
    }
}

extension RandomEvent {
    var isClose: Bool {
        guard case .close = self else { return false }
        return true
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
        case .close: self.close().effect
        case .refused: self.refusedEffect()
        case .fired(let scheduled): self.fired(scheduled: scheduled).effect
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

    /// Mostly the caller's events and firings; now and then a refusal, an abandonment or a
    /// close, which end a run's interesting part.
    mutating func event() -> RandomEvent {
        switch Int.random(in: 0..<8, using: &self) {
        case 0: return .schedule(self.schedule())
        case 1: return .reschedule(self.schedule())
        case 2: return .suspend
        case 3: return .resume(now: Int64.random(in: 0...20_000, using: &self))
        case 4: return .cancel
        case 5:
            switch Int.random(in: 0..<16, using: &self) {
            case 0: return .close
            case 1, 2: return .refused
            case 3: return .abandon
            default: return .cancel
            }
        default: return .fired(scheduled: Int64.random(in: 0...20_000, using: &self))
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
            let event = rng.event()
            let effect = machine.apply(event)
            let outcome = model.apply(event)
            #expect(Outcome(effect) == outcome, "step \(step): \(event)")
            #expect(Phase(machine.state) == model.phase, "step \(step): \(event)")
            switch (event, effect) {
            case (.schedule(let schedule), .arm(let armed)), (.reschedule(let schedule), .arm(let armed)):
                #expect(armed == schedule)
                delivered = nil
            case (.reschedule, .keepSuspended):
                delivered = nil
            case (.resume(let now), .arm(let armed)):
                #expect(armed.deadlineNanoseconds >= now || !armed.isRepeating)
                if armed.isRepeating, let delivered { #expect(armed.deadlineNanoseconds > delivered) }
            case (.fired(let scheduled), .runHandler):
                delivered = scheduled
            default:
                break
            }
            if Outcome(effect) != outcome { return }
        }
    }
}
