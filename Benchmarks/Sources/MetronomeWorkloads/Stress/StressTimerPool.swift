@preconcurrency import Dispatch
import Metronome
import MetronomeMeasurements
import Synchronization

/// One pooled timer: the `SafeDispatchTimer` and what its callers know about it.
///
/// A timer is one-shot or repeating for life, so every schedule and reschedule of it is of
/// one kind whichever thread made it, and "a one-shot fires at most once per schedule" holds
/// however the calls interleave.
final class StressTimer: Sendable {
    let timer: SafeDispatchTimer
    /// Never held while calling into ``timer``: `cancelAndWait` may wait for a handler
    /// that takes it.
    let shadow = LockedCondition(StressShadow())
    let repeating: Bool

    init(backend: SafeDispatchTimer.Backend, repeating: Bool, queue: DispatchQueue?) {
        self.timer = SafeDispatchTimer(queue: queue, backend: backend)
        self.repeating = repeating
    }
}

/// A pool of `SafeDispatchTimer`s on one backend, operated on at random by every stress thread
/// and by the timers' own handlers, checking each handler entry as it happens.
///
/// Slots are swapped under a per-slot lock; every call into a timer happens after that lock
/// is released, and a dropped timer is released outside it (its deinit calls the backend).
final class StressTimerPool: StressSubject {
    enum Operation: Int, CaseIterable {
        case create, drop, schedule, reschedule, suspend, resume, cancel, cancelAndWait, state

        var weight: Int {
            switch self {
            case .create: 6
            case .drop: 4
            case .schedule: 24
            case .reschedule: 14
            case .suspend: 12
            case .resume: 12
            case .cancel: 12
            case .cancelAndWait: 8
            case .state: 4
            }
        }
    }

    /// One-shot deadlines are 0–3 ms away, periods 0.5–3 ms: the pool really fires.
    static let delay: ClosedRange<Int64> = 0...3_000_000
    static let period: ClosedRange<Int64> = 500_000...3_000_000

    let name: String
    let operationNames = Operation.allCases.map { "\($0)" }
    private let weights = Operation.allCases.map(\.weight)
    private let totalWeight = Operation.allCases.reduce(0) { $0 + $1.weight }

    private let backend: SafeDispatchTimer.Backend
    /// The engine behind ``backend``, whose counters are checked at the end; `nil` for GCD.
    private let engine: TimerEngine?
    private let slots: [LockedCondition<StressTimer?>]
    /// Where a quarter of the timers run their handlers: a concurrent queue, on which one
    /// timer's handlers must still run one at a time.
    private let handlerQueue = DispatchQueue(label: "metronome.stress.handlers", attributes: .concurrent)
    private let violations: StressViolations
    private let live = StressLiveObjects()
    private let tokens = Atomic<UInt64>(0)
    private let closing = Atomic<Bool>(false)

    private let entries = Atomic<Int>(0)
    private let oneShots = Atomic<Int>(0)
    private let missedSeen = Atomic<Int>(0)
    private let selfOperations = Atomic<Int>(0)
    private let gatedEntries = Atomic<Int>(0)

    init(
        name: String, backend: SafeDispatchTimer.Backend, engine: TimerEngine?, timers: Int,
        violations: StressViolations
    ) {
        self.name = name
        self.backend = backend
        self.engine = engine
        self.slots = (0..<timers).map { _ in LockedCondition(nil) }
        self.violations = violations
    }

    private func newTimer(repeating: Bool, _ random: inout SplitMix64) -> StressTimer {
        let queue = random.next(below: 4) == 0 ? self.handlerQueue : nil
        return StressTimer(backend: self.backend, repeating: repeating, queue: queue)
    }

    func step(_ random: inout SplitMix64) -> Int {
        let operation = Operation(rawValue: random.pick(weights: self.weights, total: self.totalWeight))!
        let slot = Int(random.next(below: Int64(self.slots.count)))
        switch operation {
        case .create:
            let timer = self.newTimer(repeating: random.next(below: 10) < 4, &random)
            let old = self.slots[slot].withLock { current in
                defer { current = timer }
                return current
            }
            withExtendedLifetime(old) {}  // released here, outside the slot lock
        case .drop:
            let old = self.slots[slot].withLock { current in
                defer { current = nil }
                return current
            }
            withExtendedLifetime(old) {}
        case .schedule:
            // Scheduling an empty slot fills it first, so most slots hold a timer.
            let timer =
                self.occupant(of: slot)
                ?? self.install(self.newTimer(repeating: random.next(below: 10) < 4, &random), in: slot)
            self.schedule(timer, slot: slot, &random)
        case .reschedule:
            if let timer = self.occupant(of: slot) { self.reschedule(timer, fromHandler: false, &random) }
        case .suspend:
            if let timer = self.occupant(of: slot) { self.suspend(timer) }
        case .resume:
            if let timer = self.occupant(of: slot) { self.resume(timer) }
        case .cancel:
            if let timer = self.occupant(of: slot) { self.cancel(timer, fromHandler: false) }
        case .cancelAndWait:
            if let timer = self.occupant(of: slot) { self.cancelAndWait(timer) }
        case .state:
            _ = self.occupant(of: slot)?.timer.state
        }
        return operation.rawValue
    }

    private func occupant(of slot: Int) -> StressTimer? {
        self.slots[slot].withLock { $0 }
    }

    private func install(_ timer: StressTimer, in slot: Int) -> StressTimer {
        self.slots[slot].withLock { current in
            if let current { return current }
            current = timer
            return timer
        }
    }

    // MARK: Calls into a timer, each bracketed for the shadow

    /// A schedule starting soon, so the pool keeps firing.
    private static func randomGrid(for stress: StressTimer, _ random: inout SplitMix64) -> StressGrid {
        StressGrid(
            start: MonotonicTime.now() + random.nanoseconds(in: Self.delay),
            period: stress.repeating ? random.nanoseconds(in: Self.period) : nil
        )
    }

    private func schedule(_ stress: StressTimer, slot: Int, _ random: inout SplitMix64) {
        let token = self.tokens.add(1, ordering: .relaxed).newValue
        let context = StressHandlerContext(token: token, repeating: stress.repeating, live: self.live)
        let grid = Self.randomGrid(for: stress, &random)
        let ticket = stress.shadow.withLock { shadow in
            shadow.register(grid, token: token)
            return shadow.begin(.schedule)
        }
        let shadow = stress.shadow
        let accepted = stress.timer.schedule(
            deadline: DispatchTime(uptimeNanoseconds: UInt64(grid.start)),
            repeating: grid.period.map { .nanoseconds(Int($0)) } ?? .never,
            leeway: .nanoseconds(0)
        ) { [weak stress, self] tick in
            self.handle(tick, context: context, shadow: shadow, timer: stress, slot: slot)
        }
        stress.shadow.withLock { $0.end(ticket, .schedule, accepted: accepted) }
    }

    private func reschedule(_ stress: StressTimer, fromHandler: Bool, _ random: inout SplitMix64) {
        let grid = Self.randomGrid(for: stress, &random)
        // From its own handler, the firing in flight is that handler itself.
        let call = StressShadow.Call.reschedule(grid, allowance: fromHandler ? 0 : 1)
        let ticket = stress.shadow.withLock { shadow in
            // Any handler may carry it: reschedule keeps whichever one is installed.
            shadow.register(grid, token: nil)
            return shadow.begin(call)
        }
        let accepted = stress.timer.reschedule(
            deadline: DispatchTime(uptimeNanoseconds: UInt64(grid.start)),
            repeating: grid.period.map { .nanoseconds(Int($0)) } ?? .never
        )
        stress.shadow.withLock { $0.end(ticket, call, accepted: accepted) }
    }

    private func suspend(_ stress: StressTimer) {
        let ticket = stress.shadow.withLock { $0.begin(.suspend) }
        let accepted = stress.timer.suspend()
        stress.shadow.withLock { $0.end(ticket, .suspend, accepted: accepted) }
    }

    private func resume(_ stress: StressTimer) {
        let ticket = stress.shadow.withLock { $0.begin(.resume) }
        let accepted = stress.timer.resume()
        stress.shadow.withLock { $0.end(ticket, .resume, accepted: accepted) }
    }

    private func cancel(_ stress: StressTimer, fromHandler: Bool) {
        let call = StressShadow.Call.cancel(allowance: fromHandler ? 0 : 1)
        let ticket = stress.shadow.withLock { $0.begin(call) }
        let accepted = stress.timer.cancel()
        stress.shadow.withLock { $0.end(ticket, call, accepted: accepted) }
    }

    private func cancelAndWait(_ stress: StressTimer) {
        let ticket = stress.shadow.withLock { $0.begin(.cancelAndWait) }
        stress.timer.cancelAndWait()
        stress.shadow.withLock { $0.end(ticket, .cancelAndWait, accepted: nil) }
    }

    // MARK: The handler

    private func handle(
        _ tick: Tick,
        context: StressHandlerContext,
        shadow: LockedCondition<StressShadow>,
        timer: StressTimer?,
        slot: Int
    ) {
        let now = MonotonicTime.now()
        let scheduled = tick.scheduled.nanoseconds
        var broken: [StressInvariant] = []
        var gated = false
        let grid = shadow.withLock { shadow in
            let grid = shadow.enter(token: context.token, scheduled: scheduled, broken: &broken, gated: &gated)
            if now < scheduled { broken.append(.early) }
            Self.check(tick, on: grid, context: context, broken: &broken)
            return grid
        }
        self.entries.add(1, ordering: .relaxed)
        if gated { self.gatedEntries.add(1, ordering: .relaxed) }
        if context.repeating {
            self.missedSeen.add(tick.missed, ordering: .relaxed)
        } else {
            self.oneShots.add(1, ordering: .relaxed)
        }
        for invariant in broken {
            self.violations.record(
                invariant, subject: self.name,
                "token \(context.token) \(grid?.period.map { "period \($0)" } ?? (context.repeating ? "repeating" : "one-shot")) scheduled \(scheduled) fired \(tick.fired.nanoseconds) now \(now) missed \(tick.missed) sequence \(tick.sequence)"
            )
        }
        if let timer, !self.closing.load(ordering: .relaxed) {
            self.actOnOwnTimer(timer, tick: tick, token: context.token, slot: slot)
        }
        shadow.withLock { $0.exit() }
    }

    /// The rules a single tick must follow, given the grid it lies on.
    static func check(
        _ tick: Tick, on grid: StressGrid?, context: StressHandlerContext, broken: inout [StressInvariant]
    ) {
        defer { context.entries += 1 }
        guard let grid else { return }
        guard let period = grid.period else {
            if context.entries > 0 { broken.append(.oneShotTwice) }
            if tick.missed != 0 { broken.append(.missedVersusLateness) }
            return
        }
        // Leeway 0: the tick stands for the latest deadline that passed, so the next one had
        // not yet come, and it cannot have skipped more deadlines than came before it. A
        // firing late by a whole number of periods to the nanosecond is on time for the
        // latest deadline (a 10M-operation run met one).
        let lateness = tick.fired.nanoseconds - tick.scheduled.nanoseconds
        if lateness >= 0, lateness > period || UInt64(clamping: tick.missed) > tick.sequence {
            broken.append(.missedVersusLateness)
        }
        let (offset, overflow) = Int64(clamping: tick.sequence).multipliedReportingOverflow(by: period)
        let arming = StressGrid(start: overflow ? .min : tick.scheduled.nanoseconds - offset, period: period)
        if context.lastArming == arming {
            if tick.sequence <= context.lastSequence {
                broken.append(.sequenceNotIncreasing)
            } else if tick.sequence != context.lastSequence + UInt64(tick.missed) + 1 {
                broken.append(.sequenceGap)
            }
        }
        context.lastArming = arming
        context.lastSequence = tick.sequence
    }

    /// About 5% of handlers cancel their timer, 3% reschedule it, 2% drop it from the pool,
    /// and 1% spin for up to 0.2 ms, so that other threads catch them running.
    private func actOnOwnTimer(_ stress: StressTimer, tick: Tick, token: UInt64, slot: Int) {
        var random = SplitMix64(seed: UInt64(bitPattern: tick.fired.nanoseconds) ^ (token &* 0x9E37_79B9_7F4A_7C15))
        let roll = random.next(below: 1000)
        switch roll {
        case 0..<40:
            self.cancel(stress, fromHandler: true)
        case 40..<50:
            self.cancelAndWait(stress)
        case 50..<80:
            self.reschedule(stress, fromHandler: true, &random)
        case 80..<100:
            let replacement =
                random.next(below: 2) == 0 ? self.newTimer(repeating: stress.repeating, &random) : nil
            let old = self.slots[slot].withLock { current -> StressTimer? in
                guard current === stress else { return nil }
                defer { current = replacement }
                return current
            }
            withExtendedLifetime(old) {}
        case 100..<110:
            MonotonicTime.spin(nanoseconds: random.nanoseconds(in: 50_000...200_000))
        default:
            return
        }
        self.selfOperations.add(1, ordering: .relaxed)
    }

    // MARK: The end of the run

    func finish(operations: [Int], seconds: Double) -> StressResult {
        self.closing.store(true, ordering: .relaxed)
        // Every op thread has been joined; wait out running handlers, then drop every timer.
        for slot in self.slots {
            slot.withLock { $0 }?.timer.cancelAndWait()
        }
        for slot in self.slots {
            let old = slot.withLock { current in
                defer { current = nil }
                return current
            }
            withExtendedLifetime(old) {}
        }
        var counters: TimerEngine.Counters?
        if let engine = self.engine {
            // A dropped timer lives until a handler holding it returns.
            if !eventually(seconds: 5, { engine.counters.armed == 0 }) {
                let armed = engine.counters.armed
                self.violations.record(.engineArmed, subject: self.name, "\(armed) timers still armed")
            }
            let snapshot = engine.counters
            let entries = self.entries.load(ordering: .relaxed)
            if snapshot.fired < UInt64(entries) {
                self.violations.record(
                    .engineFired, subject: self.name, "fired \(snapshot.fired) < \(entries) handler entries")
            }
            // A firing that came while its timer's handler ran is merged into the next one, whose
            // `missed` then counts it: handlers account for each period the engine fired or
            // counted missed, at most once, but not necessarily in the same column.
            let accounted = UInt64(entries) + UInt64(self.missedSeen.load(ordering: .relaxed))
            if snapshot.fired + snapshot.missedPeriods < accounted {
                self.violations.record(
                    .engineMissed, subject: self.name,
                    "fired \(snapshot.fired) + missed \(snapshot.missedPeriods) < \(accounted) seen")
            }
            engine.syncShutdown()
            counters = engine.counters
        }
        if !eventually(seconds: 5, { self.live.liveCount == 0 }) {
            let live = self.live.liveCount
            self.violations.record(
                .liveContexts, subject: self.name, count: live, "\(live) of \(self.live.createdCount) contexts alive")
        }
        let entries = self.entries.load(ordering: .relaxed)
        let oneShots = self.oneShots.load(ordering: .relaxed)
        return StressResult(
            backend: self.name,
            seconds: seconds,
            operationsByKind: self.operationsByKind(operations),
            handlerEntries: entries,
            oneShotFirings: oneShots,
            repeatingTicks: entries - oneShots,
            missedPeriods: self.missedSeen.load(ordering: .relaxed),
            handlerSelfOperations: self.selfOperations.load(ordering: .relaxed),
            gatedEntries: self.gatedEntries.load(ordering: .relaxed),
            handlerContexts: self.live.createdCount,
            violations: self.violations.counts(subject: self.name),
            engineCounters: counters
        )
    }
}
