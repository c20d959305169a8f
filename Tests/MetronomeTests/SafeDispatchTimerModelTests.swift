@preconcurrency import Dispatch
import Foundation
import Glibc
import MetronomeTesting
import Synchronization
import Testing

@testable import Metronome

/// A long single-threaded run in virtual time, checked step by step against a reference
/// model.
@Suite(.serialized, .tags(.realTime))
struct SafeDispatchTimerModelTests {
    /// The reference model for one timer: `TimerContract` for the states and return values,
    /// and from `TimerSchedule.resumed(at:)` the deadlines: repeating deadlines `d + k·p`,
    /// and a repeating timer resumed at `now` continuing at the first `d + k·p` strictly
    /// after `now` (a deadline at the resume instant may have been delivered just before the
    /// suspend); a one-shot keeps its deadline and fires at once if it has passed.
    struct ReferenceTimer {
        var state: SafeDispatchTimer.State = .idle
        /// The schedule as given: first deadline and period.
        var start: Int64 = 0
        var period: Int64?
        /// The next deadline to fire while running.
        var next: Int64 = 0
        /// When each firing happened: its deadline, or the time of the advance that found
        /// it already due (a one-shot resumed after its deadline).
        var fired: [Int64] = []

        /// Moves to the state the contract gives `operation`; returns whether it accepted it.
        private mutating func apply(_ operation: TimerContract.Operation) -> Bool {
            let outcome = TimerContract.outcome(of: operation, in: self.state)
            self.state = outcome.state
            return outcome.accepted
        }

        mutating func schedule(deadline: Int64, period: Int64?) -> Bool {
            guard self.apply(.schedule) else { return false }
            (self.start, self.period, self.next) = (deadline, period, deadline)
            return true
        }

        mutating func reschedule(deadline: Int64, period: Int64?) -> Bool {
            guard self.apply(.reschedule) else { return false }
            (self.start, self.period, self.next) = (deadline, period, deadline)
            return true
        }

        mutating func suspend() -> Bool {
            self.apply(.suspend)
        }

        mutating func resume(now: Int64) -> Bool {
            guard self.apply(.resume) else { return false }
            self.next = self.start
            if let period = self.period, now >= self.start {
                self.next = self.start + ((now - self.start) / period + 1) * period
            }
            // The resumed schedule starts there (its sequence restarts), as TimerSchedule.resumed(at:).
            self.start = self.next
            return true
        }

        mutating func cancel() -> Bool {
            self.apply(.cancel)
        }

        /// Time moves from `then` to `now`: every deadline at or before `now` fires, as long
        /// as the contract lets the timer fire.
        mutating func advance(from then: Int64, to now: Int64) {
            while self.next <= now, self.apply(self.period == nil ? .oneShotFires : .repeatingFires) {
                self.fired.append(max(self.next, then))
                if let period = self.period { self.next += period }
            }
        }
    }

    @Test(.timeLimit(.minutes(1))) func virtualTimeAgreesWithTheReferenceModel() throws {
        let seed = testSeed()
        var generator = SeededGenerator(seed: seed)
        let timeline = ManualTimeline(startingAt: ManualHarness.origin)
        let count = 3
        let timers = (0..<count).map { _ in SafeDispatchTimer(backend: .custom(timeline)) }
        let fired = (0..<count).map { _ in Locked<[Tick]>([]) }
        let clockErrors = Locked(0)
        var models = Array(repeating: ReferenceTimer(), count: count)
        let ms: Int64 = 1_000_000

        func handler(_ index: Int) -> @Sendable (Tick) -> Void {
            { tick in
                // At the deadline itself, or, for a one-shot resumed after its deadline
                // passed, late: handlers see the tick's own `fired` time.
                if timeline.now != tick.fired || tick.fired < tick.scheduled { clockErrors.withLock { $0 += 1 } }
                fired[index].withLock { $0.append(tick) }
            }
        }

        for step in 0..<5_000 {
            let index = Int.random(in: 0..<count, using: &generator)
            let timer = timers[index]
            let now = timeline.now.nanoseconds
            let deadline =
                now + Int64.random(in: 0...40, using: &generator) * ms + Int64.random(in: 0...999, using: &generator)
            let period: Int64? = Bool.random(using: &generator) ? nil : Int64.random(in: 1...15, using: &generator) * ms
            let description: String
            switch Int.random(in: 0..<10, using: &generator) {
            case 0:
                description = "schedule(deadline: +\(deadline - now), repeating: \(String(describing: period)))"
                let accepted = timer.schedule(
                    deadline: DispatchTime(uptimeNanoseconds: UInt64(deadline)),
                    repeating: period.map { .nanoseconds(Int($0)) } ?? .never,
                    leeway: .microseconds(Int.random(in: 0...500, using: &generator)),
                    handler: handler(index)
                )
                #expect(
                    accepted == models[index].schedule(deadline: deadline, period: period),
                    "step \(step): \(description) (seed \(seed))")
            case 1:
                description = "schedule(at: +\(deadline - now), every: \(String(describing: period)))"
                let accepted = timer.schedule(
                    at: TimerInstant(nanoseconds: deadline), every: period.map { .nanoseconds($0) },
                    handler: handler(index))
                #expect(
                    accepted == models[index].schedule(deadline: deadline, period: period),
                    "step \(step): \(description) (seed \(seed))")
            case 2:
                let milliseconds = Int64.random(in: 1...20, using: &generator)
                description = "schedule(interval: \(milliseconds) ms)"
                let interval = Double(milliseconds) / 1000
                let nanoseconds = Int64(interval * 1e9)
                let accepted = timer.schedule(interval: interval) {
                    let now = timeline.now
                    fired[index].withLock { $0.append(Tick(scheduled: now, fired: now, missed: 0, sequence: 0)) }
                }
                #expect(
                    accepted == models[index].schedule(deadline: now + nanoseconds, period: nanoseconds),
                    "step \(step): \(description) (seed \(seed))")
            case 3:
                description = "reschedule(+\(deadline - now), \(String(describing: period)))"
                let accepted = timer.reschedule(
                    deadline: DispatchTime(uptimeNanoseconds: UInt64(deadline)),
                    repeating: period.map { .nanoseconds(Int($0)) } ?? .never)
                #expect(
                    accepted == models[index].reschedule(deadline: deadline, period: period),
                    "step \(step): \(description) (seed \(seed))")
            case 4:
                description = "suspend"
                #expect(timer.suspend() == models[index].suspend(), "step \(step): suspend (seed \(seed))")
            case 5:
                description = "resume"
                #expect(timer.resume() == models[index].resume(now: now), "step \(step): resume (seed \(seed))")
            case 6:
                description = "cancel"
                #expect(timer.cancel() == models[index].cancel(), "step \(step): cancel (seed \(seed))")
            case 7:
                description = "cancelAndWait"
                timer.cancelAndWait()
                _ = models[index].cancel()
            default:
                let by = Bool.random(using: &generator) ? 0 : Int64.random(in: 0...30_000_000, using: &generator)
                description = "advance(by: \(by) ns)"
                timeline.advance(by: .nanoseconds(by))
                for model in models.indices { models[model].advance(from: now, to: now + by) }
            }
            for check in 0..<count {
                let state = timers[check].state
                let ticks = fired[check].current
                guard state == models[check].state, ticks.count == models[check].fired.count else {
                    Issue.record(
                        "step \(step) after \(description) on timer \(index): timer \(check) is \(state) with \(ticks.count) firings, model \(models[check].state) with \(models[check].fired.count) (seed \(seed))"
                    )
                    return
                }
            }
        }
        for index in 0..<count {
            #expect(
                fired[index].current.map(\.fired.nanoseconds) == models[index].fired, "timer \(index) (seed \(seed))")
        }
        #expect(clockErrors.current == 0, "handlers saw the clock off their deadline")
        #expect(models.map(\.fired.count).reduce(0, +) > 500, "too few firings to mean anything")
    }
}
