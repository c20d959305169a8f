import Foundation
import Metronome
import MetronomeTesting
import Synchronization
import Testing

/// One table of inputs, one answer each, for every type that takes them: a timer, the
/// scheduler, ticks, the clock's sleep and an expiring value (the table of the "Choosing an
/// API" article). Each type is driven on virtual time, so "at once" is "by an advance of
/// zero" and "never" is "not after an hour".
@Suite
struct InputRulesTests {
    enum Outcome: Equatable, CustomStringConvertible {
        case firesAtOnce, neverFires, refused

        var description: String {
            switch self {
            case .firesAtOnce: "fires at once"
            case .neverFires: "never fires"
            case .refused: "refused"
            }
        }
    }

    struct Rule: Sendable, CustomTestStringConvertible {
        let name: String
        let delay: Duration
        let period: Duration?
        let leeway: Duration
        let outcome: Outcome

        var testDescription: String { self.name }
    }

    static let rules: [Rule] = [
        Rule(name: "negative delay", delay: .seconds(-1), period: nil, leeway: .zero, outcome: .firesAtOnce),
        Rule(name: "zero delay", delay: .zero, period: nil, leeway: .zero, outcome: .firesAtOnce),
        Rule(name: "negative leeway", delay: .zero, period: nil, leeway: .seconds(-1), outcome: .firesAtOnce),
        Rule(
            name: "leeway past Int64 ns", delay: .zero, period: nil, leeway: .seconds(Int64.max), outcome: .firesAtOnce),
        Rule(name: "delay past Int64 ns", delay: .seconds(Int64.max), period: nil, leeway: .zero, outcome: .neverFires),
        Rule(name: "zero period", delay: .seconds(1), period: .zero, leeway: .zero, outcome: .refused),
        Rule(name: "negative period", delay: .seconds(1), period: .seconds(-1), leeway: .zero, outcome: .refused),
    ]

    /// One rule for a span past `Int64` nanoseconds in the Dispatch-shaped forms too, as for a
    /// `Duration`: accepted, and its deadline never comes. A `TimeInterval` of 9.2e9 s (under
    /// `Int64` nanoseconds) and of 1e300 s, and a `DispatchTimeInterval` of `Int.max`
    /// seconds as a period and as a leeway.
    @Test func aSpanPastInt64NanosecondsSaturatesInEveryForm() {
        let timeline = ManualTimeline()
        let fired = Atomic<Int>(0)
        let count: @Sendable () -> Void = { fired.add(1, ordering: .relaxed) }
        let long = SafeDispatchTimer(backend: .custom(timeline))
        let longer = SafeDispatchTimer(backend: .custom(timeline))
        let period = SafeDispatchTimer(backend: .custom(timeline))
        let leeway = SafeDispatchTimer(backend: .custom(timeline))
        #expect(long.schedule(interval: 9.2e9, handler: count))
        #expect(longer.schedule(interval: 1e300, handler: count))
        let now = DispatchTime(uptimeNanoseconds: UInt64(timeline.now.nanoseconds))
        #expect(period.schedule(deadline: now, repeating: .seconds(Int.max), handler: count))
        #expect(leeway.schedule(deadline: now, repeating: .seconds(1), leeway: .seconds(Int.max), handler: count))
        timeline.advance(by: .zero)
        // The period's first deadline and the leeway's come now; nothing else for an hour.
        #expect(fired.load(ordering: .relaxed) == 2)
        timeline.advance(by: .seconds(3600))
        #expect(fired.load(ordering: .relaxed) == 2 + 3600)
        for timer in [long, longer, period, leeway] { timer.cancel() }
    }

    /// What happened by an advance of zero, or else by an hour of virtual time.
    private static func outcome(_ timeline: ManualTimeline, fired: () -> Bool) -> Outcome {
        timeline.advance(by: .zero)
        if fired() { return .firesAtOnce }
        timeline.advance(by: .seconds(3600))
        return fired() ? .firesAtOnce : .neverFires
    }

    @Test(arguments: Self.rules)
    func timer(_ rule: Rule) throws {
        let timeline = ManualTimeline()
        let timer = SafeDispatchTimer(backend: .custom(timeline))
        let fired = Atomic<Int>(0)
        let accepted = timer.schedule(after: rule.delay, every: rule.period, leeway: rule.leeway) {
            fired.add(1, ordering: .relaxed)
        }
        let outcome = accepted ? Self.outcome(timeline) { fired.load(ordering: .relaxed) > 0 } : .refused
        #expect(outcome == rule.outcome)
        // The reporting form throws exactly where the `Bool` form refuses, and says why.
        let thrower = SafeDispatchTimer(backend: .custom(timeline))
        do {
            #expect(try thrower.start(after: rule.delay, every: rule.period, leeway: rule.leeway) {})
            #expect(accepted)
        } catch {
            #expect(!accepted)
            #expect(error == .invalidArgument)
        }
    }

    @Test(.timeLimit(.minutes(1)), arguments: Self.rules)
    func scheduler(_ rule: Rule) async {
        let timeline = ManualTimeline()
        let scheduler = TimerScheduler(backend: .custom(timeline))
        var events = scheduler.events.makeAsyncIterator()
        let id = scheduler.schedule(after: rule.delay, every: rule.period, leeway: rule.leeway)
        timeline.advance(by: .zero)
        // A marker due after the hour tells "nothing happened" from "not delivered yet".
        let marker = scheduler.schedule(after: .seconds(3600))
        timeline.advance(by: .seconds(3600))
        var outcome = Outcome.neverFires
        while let event = await events.next(), event.id != marker {
            if event == .cancelled(id) { outcome = .refused }
            if event.id == id, case .executed = event, outcome == .neverFires { outcome = .firesAtOnce }
        }
        #expect(outcome == rule.outcome)
    }

    @Test(.timeLimit(.minutes(1)), arguments: Self.rules.filter { $0.period == nil })
    func clock(_ rule: Rule) async throws {
        let timeline = ManualTimeline()
        let clock = EngineClock(backend: .custom(timeline))
        guard rule.outcome == .neverFires else {
            // A sleep whose deadline has passed returns without arming a timer.
            try await clock.sleep(for: rule.delay, tolerance: rule.leeway)
            #expect(timeline.armedCount == 0)
            return
        }
        let sleeper = Task { try await clock.sleep(for: rule.delay, tolerance: rule.leeway) }
        await timeline.waitForArmedTimers(1)
        timeline.advance(by: .seconds(3600))
        sleeper.cancel()
        await #expect(throws: CancellationError.self) { try await sleeper.value }
    }

    @Test(arguments: Self.rules.filter { $0.period == nil })
    func expiringValue(_ rule: Rule) {
        let timeline = ManualTimeline()
        let value = ExpiringValue(1, lifetime: rule.delay, backend: .custom(timeline))
        #expect(Self.outcome(timeline) { value.isExpired } == rule.outcome)
    }

    @Test(.timeLimit(.minutes(1)), arguments: Self.rules.filter { $0.period != nil })
    func ticks(_ rule: Rule) async throws {
        let timeline = ManualTimeline()
        let ticks = SafeDispatchTimer.Backend.custom(timeline).ticks(every: try #require(rule.period))
        var iterator = ticks.makeAsyncIterator()
        // A refused period ends the sequence at once; a sequence has no other way to say it.
        #expect(await iterator.next() == nil)
        #expect(rule.outcome == .refused)
    }
}
