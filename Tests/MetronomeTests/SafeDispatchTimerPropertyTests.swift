@preconcurrency import Dispatch
import Foundation
import Glibc
import MetronomeTesting
import Synchronization
import Testing

@testable import Metronome

/// Random operation sequences from four threads against the real backends.
@Suite(.serialized, .tags(.realTime))
struct SafeDispatchTimerPropertyTests {
    // MARK: Concurrent runs on the real backends

    /// Deadlines are `k · unit + id` and periods whole units, so `tick.scheduled % unit`
    /// names the `schedule`/`reschedule` call a firing belongs to, on either backend and
    /// across a resume (which keeps the phase).
    static let unit: Int64 = 1_000_000

    /// Which call was made, for the bookkeeping.
    enum Operation: CaseIterable {
        case schedule, scheduleAt, reschedule, suspend, resume, cancel, cancelAndWait, readState

        /// The contract's operation this call follows; `nil` for reading the state.
        var contract: TimerContract.Operation? {
            switch self {
            case .schedule, .scheduleAt: .schedule
            case .reschedule: .reschedule
            case .suspend: .suspend
            case .resume: .resume
            case .cancel, .cancelAndWait: .cancel
            case .readState: nil
            }
        }
    }

    /// A schedule identified by its phase.
    struct Arming {
        let id: Int64
        let deadline: Int64
        let period: Int64

        static func random(id: Int64, now: Int64, using generator: inout SeededGenerator) -> Arming {
            // The next unit boundary or the one after: soon, so that most armings fire.
            let base = (now / unit + Int64.random(in: 0...1, using: &generator)) * unit
            let deadline = base + id > now ? base + id : base + unit + id
            return Arming(id: id, deadline: deadline, period: unit * Int64.random(in: 1...2, using: &generator))
        }
    }

    /// One handler invocation: the phase it fired on and the epoch it saw at entry.
    struct Entry {
        let id: Int64
        let epoch: UInt64
        let tick: Tick
        let clock: TimerInstant
    }

    /// The epochs during which a phase was armed; `[start, end)`, `end == nil` while armed.
    /// `grace` is how many firings may still start after `end`: one already decided when a
    /// plain `suspend`/`cancel`/`reschedule` returned, none after `cancelAndWait`.
    struct LiveInterval {
        var start: UInt64
        var end: UInt64?
        var grace: Int
        var stale = 0
    }

    /// What the test knows, under the test's own lock (only in the checked phase).
    struct Model {
        var state: SafeDispatchTimer.State = .idle
        var current: Int64?
        var intervals: [Int64: [LiveInterval]] = [:]
        var mismatches: [String] = []

        mutating func open(_ id: Int64, at epoch: UInt64) {
            self.intervals[id, default: []].append(LiveInterval(start: epoch, end: nil, grace: 1))
        }

        mutating func close(_ id: Int64, at epoch: UInt64, grace: Int) {
            guard var list = self.intervals[id], let last = list.indices.last, list[last].end == nil else {
                self.mismatches.append("closing \(id), which is not armed")
                return
            }
            list[last].end = epoch
            list[last].grace = grace
            self.intervals[id] = list
        }
    }

    /// Everything one run shares between its threads.
    final class Run: Sendable {
        let harness: any TimerHarness
        let timer: SafeDispatchTimer
        let epoch = Atomic<UInt64>(0)
        let nextID = Atomic<Int64>(1)
        let entries = Locked<[Entry]>([])
        let model = Locked(Model())
        let operations = Atomic<Int>(0)

        init(harness: any TimerHarness) {
            self.harness = harness
            self.timer = harness.makeTimer()
        }

        var handler: @Sendable (Tick) -> Void {
            { tick in
                let clock = self.harness.handlerClock()
                let epoch = self.epoch.load(ordering: .acquiring)
                let entry = Entry(
                    id: tick.scheduled.nanoseconds % SafeDispatchTimerPropertyTests.unit, epoch: epoch, tick: tick,
                    clock: clock)
                self.entries.withLock { $0.append(entry) }
            }
        }

        func newArming(using generator: inout SeededGenerator) -> Arming {
            let id = self.nextID.add(1, ordering: .relaxed).oldValue % (SafeDispatchTimerPropertyTests.unit - 1) + 1
            return Arming.random(id: id, now: self.harness.now.nanoseconds, using: &generator)
        }

        /// Performs `operation` with no bookkeeping: the free-for-all phase.
        func perform(_ operation: Operation, using generator: inout SeededGenerator) {
            self.operations.add(1, ordering: .relaxed)
            switch operation {
            case .schedule:
                let arming = self.newArming(using: &generator)
                self.timer.schedule(
                    deadline: DispatchTime(uptimeNanoseconds: UInt64(arming.deadline)),
                    repeating: .nanoseconds(Int(arming.period)),
                    leeway: .microseconds(Int.random(in: 0...200, using: &generator)),
                    handler: self.handler
                )
            case .scheduleAt:
                let arming = self.newArming(using: &generator)
                self.timer.schedule(
                    at: TimerInstant(nanoseconds: arming.deadline),
                    every: .nanoseconds(arming.period),
                    handler: self.handler
                )
            case .reschedule:
                let arming = self.newArming(using: &generator)
                self.timer.reschedule(
                    deadline: DispatchTime(uptimeNanoseconds: UInt64(arming.deadline)),
                    repeating: .nanoseconds(Int(arming.period))
                )
            case .suspend: self.timer.suspend()
            case .resume: self.timer.resume()
            case .cancel: self.timer.cancel()
            case .cancelAndWait: self.timer.cancelAndWait()
            case .readState: _ = self.timer.state
            }
        }

        /// Performs `operation` under the test's lock and records exactly what it did: the
        /// checked phase. Firings and state reads still race it; only calls are serialised.
        func performChecked(_ operation: Operation, using generator: inout SeededGenerator) {
            self.operations.add(1, ordering: .relaxed)
            if operation == .readState {
                _ = self.timer.state
                return
            }
            self.model.withLock { model in
                let before = model.state
                let startEpoch = self.epoch.load(ordering: .acquiring)
                let endEpoch = startEpoch + 1
                let expected = SafeDispatchTimerPropertyTests.expectedOutcome(operation, from: before)
                var returned: Bool?
                switch operation {
                case .schedule, .scheduleAt:
                    let arming = self.newArming(using: &generator)
                    returned =
                        operation == .schedule
                        ? self.timer.schedule(
                            deadline: DispatchTime(uptimeNanoseconds: UInt64(arming.deadline)),
                            repeating: .nanoseconds(Int(arming.period)),
                            handler: self.handler)
                        : self.timer.schedule(
                            at: TimerInstant(nanoseconds: arming.deadline), every: .nanoseconds(arming.period),
                            handler: self.handler)
                    if returned == true {
                        model.current = arming.id
                        model.open(arming.id, at: startEpoch)
                    }
                case .reschedule:
                    let arming = self.newArming(using: &generator)
                    returned = self.timer.reschedule(
                        deadline: DispatchTime(uptimeNanoseconds: UInt64(arming.deadline)),
                        repeating: .nanoseconds(Int(arming.period)))
                    if returned == true {
                        if before == .running, let old = model.current {
                            model.close(old, at: endEpoch, grace: 1)
                            model.open(arming.id, at: startEpoch)
                        }
                        model.current = arming.id
                    }
                case .suspend:
                    returned = self.timer.suspend()
                    if returned == true, let current = model.current { model.close(current, at: endEpoch, grace: 1) }
                case .resume:
                    returned = self.timer.resume()
                    if returned == true, let current = model.current { model.open(current, at: startEpoch) }
                case .cancel:
                    returned = self.timer.cancel()
                    if returned == true {
                        if before == .running, let current = model.current {
                            model.close(current, at: endEpoch, grace: 1)
                        }
                        model.current = nil
                    }
                case .cancelAndWait:
                    self.timer.cancelAndWait()
                    if expected.state != before {
                        if before == .running, let current = model.current {
                            model.close(current, at: endEpoch, grace: 0)
                        }
                        model.current = nil
                    }
                case .readState:
                    break
                }
                if returned != expected.returns {
                    model.mismatches.append("\(operation) from \(before) returned \(String(describing: returned))")
                }
                model.state = expected.state
                if expected.state != before || returned == true {
                    self.epoch.store(endEpoch, ordering: .releasing)
                }
                let after = self.timer.state
                if after != model.state {
                    model.mismatches.append("\(operation) from \(before): state \(after), model \(model.state)")
                    model.state = after
                }
            }
        }
    }

    /// Runs `body` on `threads` threads until `duration` has passed; returns once all have
    /// finished (waiting on a condition, with a generous timeout).
    static func hammer(
        threads: Int,
        for duration: Duration,
        seed: UInt64,
        _ body: @escaping @Sendable (inout SeededGenerator) -> Void
    ) -> Bool {
        let finished = Locked(0)
        let notifier = Notifier()
        let end = ContinuousClock.now.advanced(by: duration)
        for index in 0..<threads {
            let thread = Thread {
                var generator = SeededGenerator(seed: seed &+ UInt64(index) &* 0x9E37_79B9)
                while ContinuousClock.now < end {
                    body(&generator)
                    // Let firings happen between calls.
                    usleep(UInt32.random(in: 0...1_500, using: &generator))
                }
                finished.withLock { $0 += 1 }
                notifier.notify()
            }
            thread.start()
        }
        return notifier.wait(timeout: duration + .seconds(20)) { finished.current == threads }
    }

    static func randomOperation(using generator: inout SeededGenerator) -> Operation {
        // Weighted towards the calls that arm, so the timer spends time running.
        let weighted: [Operation] = [
            .schedule, .schedule, .scheduleAt, .reschedule, .reschedule, .suspend, .resume, .resume, .cancel,
            .cancelAndWait, .readState, .readState, .readState, .readState, .readState, .readState,
        ]
        return weighted.randomElement(using: &generator)!
    }

    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.real)
    func concurrentRandomOperations(kind: HarnessKind) throws {
        let seed = testSeed()
        let harness = try kind.make()
        defer { harness.tearDown() }

        // Phase 1: free for all. Calls race each other, firings and state reads.
        let chaos = Run(harness: harness)
        let chaosDone = Self.hammer(threads: 4, for: .milliseconds(500), seed: seed) { generator in
            chaos.perform(Self.randomOperation(using: &generator), using: &generator)
        }
        try #require(chaosDone, "a thread never finished (seed \(seed))")
        Self.checkNeverEarly(chaos.entries.current, seed: seed)

        // Serialised final steps: from here on the state follows each call exactly.
        var generator = SeededGenerator(seed: seed)
        let settled = chaos.timer.state
        chaos.model.withLock { model in
            model.state = settled
            model.current = nil
        }
        for _ in 0..<20 {
            let operation = Self.randomOperation(using: &generator)
            let before = chaos.timer.state
            let expectation = Self.expectedOutcome(operation, from: before)
            var returned: Bool?
            switch operation {
            case .schedule, .scheduleAt:
                let arming = chaos.newArming(using: &generator)
                returned = chaos.timer.schedule(
                    at: TimerInstant(nanoseconds: arming.deadline), every: .nanoseconds(arming.period),
                    handler: chaos.handler)
            case .reschedule:
                let arming = chaos.newArming(using: &generator)
                returned = chaos.timer.reschedule(
                    deadline: DispatchTime(uptimeNanoseconds: UInt64(arming.deadline)),
                    repeating: .nanoseconds(Int(arming.period)))
            case .suspend: returned = chaos.timer.suspend()
            case .resume: returned = chaos.timer.resume()
            case .cancel: returned = chaos.timer.cancel()
            case .cancelAndWait: chaos.timer.cancelAndWait()
            case .readState: break
            }
            #expect(returned == expectation.returns, "\(operation) from \(before) (seed \(seed))")
            #expect(chaos.timer.state == expectation.state, "\(operation) from \(before) (seed \(seed))")
        }
        chaos.timer.cancelAndWait()
        #expect(chaos.timer.state == .cancelled || chaos.timer.state == .idle)
        if let engine = (harness as? EngineHarness)?.engine {
            #expect(engine.counters.armed == 0, "armed after cancel (seed \(seed))")
        }
        let quiet = chaos.entries.current.count
        harness.advance(by: .milliseconds(20))
        #expect(chaos.entries.current.count == quiet, "fired after cancelAndWait (seed \(seed))")

        // Phase 2: calls serialised through the test's lock, so every firing can be checked
        // against the epochs during which its schedule was armed.
        let checked = Run(harness: harness)
        let checkedDone = Self.hammer(threads: 4, for: .milliseconds(500), seed: seed &+ 1) { generator in
            checked.performChecked(Self.randomOperation(using: &generator), using: &generator)
        }
        try #require(checkedDone, "a thread never finished (seed \(seed))")
        checked.performChecked(.cancelAndWait, using: &generator)
        let model = checked.model.current
        let entries = checked.entries.current
        #expect(model.mismatches.isEmpty, "seed \(seed): \(model.mismatches.prefix(5))")
        #expect(checked.timer.state == model.state)
        if let engine = (harness as? EngineHarness)?.engine {
            #expect(engine.counters.armed == 0, "armed after cancelAndWait (seed \(seed))")
        }
        Self.checkNeverEarly(entries, seed: seed)
        Self.checkNoStaleFiring(entries, model: model, seed: seed)
        #expect(entries.count > 0, "nothing fired (seed \(seed)): the run checked nothing")
        print(
            "property[\(kind)]: seed \(seed), free-for-all \(chaos.operations.load(ordering: .relaxed)) calls / \(chaos.entries.current.count) firings, checked \(checked.operations.load(ordering: .relaxed)) calls / \(entries.count) firings"
        )
    }

    /// What `TimerContract` says `operation` returns from `state` (`nil` for the calls that
    /// return nothing) and leaves behind.
    static func expectedOutcome(_ operation: Operation, from state: SafeDispatchTimer.State) -> (
        returns: Bool?, state: SafeDispatchTimer.State
    ) {
        guard let contract = operation.contract else { return (nil, state) }
        let outcome = TimerContract.outcome(of: contract, in: state)
        return (operation == .cancelAndWait ? nil : outcome.accepted, outcome.state)
    }

    static func checkNeverEarly(_ entries: [Entry], seed: UInt64, sourceLocation: SourceLocation = #_sourceLocation) {
        let early = entries.filter { $0.tick.fired < $0.tick.scheduled || $0.clock < $0.tick.scheduled }
        #expect(
            early.isEmpty, "seed \(seed): \(early.count) early firings, first \(String(describing: early.first))",
            sourceLocation: sourceLocation)
    }

    /// Every firing belongs to a phase that was armed at the epoch it saw, except at most
    /// `grace` firings per arming that were already decided when the call ending it returned.
    static func checkNoStaleFiring(_ entries: [Entry], model: Model, seed: UInt64) {
        let (unknown, violations) = Self.staleFirings(entries, intervals: model.intervals)
        #expect(
            unknown.isEmpty,
            "seed \(seed): \(unknown.count) firings of a phase never armed, first \(String(describing: unknown.first))")
        #expect(violations.isEmpty, "seed \(seed): \(violations.prefix(5))")
    }

    static func staleFirings(_ entries: [Entry], intervals: [Int64: [LiveInterval]]) -> (
        unknown: [Entry], violations: [String]
    ) {
        var intervals = intervals
        var unknown: [Entry] = []
        for entry in entries {
            guard var list = intervals[entry.id] else {
                unknown.append(entry)
                continue
            }
            if list.contains(where: { $0.start <= entry.epoch && ($0.end.map { entry.epoch < $0 } ?? true) }) {
                continue
            }
            // Charge it to the latest arming of this phase that had ended by then.
            guard let index = list.lastIndex(where: { ($0.end ?? .max) <= entry.epoch }) else {
                unknown.append(entry)
                continue
            }
            list[index].stale += 1
            intervals[entry.id] = list
        }
        var violations: [String] = []
        for (id, list) in intervals.sorted(by: { $0.key < $1.key }) {
            for interval in list where interval.stale > interval.grace {
                violations.append(
                    "phase \(id) armed in epochs [\(interval.start), \(String(describing: interval.end))) fired \(interval.stale) times after its end (grace \(interval.grace))"
                )
            }
        }
        return (unknown, violations)
    }

    /// The stale-firing check itself: it must see what it is there to see.
    @Test(.timeLimit(.minutes(1))) func staleFiringCheckCatchesLateFirings() {
        let tick = Tick(scheduled: .init(nanoseconds: 7), fired: .init(nanoseconds: 7), missed: 0, sequence: 0)
        func entry(_ id: Int64, _ epoch: UInt64) -> Entry { Entry(id: id, epoch: epoch, tick: tick, clock: tick.fired) }
        let intervals: [Int64: [LiveInterval]] = [
            7: [LiveInterval(start: 0, end: 2, grace: 1), LiveInterval(start: 4, end: nil, grace: 1)],
            9: [LiveInterval(start: 1, end: 3, grace: 0)],
        ]
        // Inside the intervals, and one in flight after phase 7's first end: fine.
        #expect(
            Self.staleFirings([entry(7, 0), entry(7, 1), entry(7, 2), entry(7, 5), entry(9, 2)], intervals: intervals)
                .violations.isEmpty)
        // Two after phase 7's first end: one too many.
        #expect(Self.staleFirings([entry(7, 2), entry(7, 3)], intervals: intervals).violations.count == 1)
        // Any after a cancelAndWait (grace 0).
        #expect(Self.staleFirings([entry(9, 3)], intervals: intervals).violations.count == 1)
        // A phase never armed, or a firing before its arming began.
        #expect(Self.staleFirings([entry(8, 1)], intervals: intervals).unknown.count == 1)
        #expect(Self.staleFirings([entry(9, 0)], intervals: intervals).unknown.count == 1)
    }
}
