import Dispatch
import Metronome
import MetronomeMeasurements
import Synchronization

/// `TimerScheduler` under stress: ids scheduled and cancelled (singly and in sets) from every
/// thread while its engine fires them, and every event audited.
///
/// Each id must end with exactly one terminal event: a one-shot with `executed(willRepeat:
/// false)` or `cancelled`, a repeating timer (cancelled at the latest by the final
/// `cancelAll`) with `cancelled`; nothing may follow it; and as many `cancelled` events
/// arrive as `cancel` calls reported. The run ends by releasing the scheduler, whose event
/// stream then finishes after every event already decided: that is the drain.
final class StressSchedulerPool: StressSubject {
    enum Operation: Int, CaseIterable {
        case schedule, cancel, cancelSet, activeTimers

        var weight: Int {
            switch self {
            case .schedule: 50
            case .cancel: 30
            case .cancelSet: 15
            case .activeTimers: 5
            }
        }
    }

    /// Ids kept for cancelling; also bounds how many repeating timers fire at once.
    static let tracked = 64

    /// What has happened to one id, as bits.
    private struct Flags: OptionSet {
        let rawValue: UInt8
        static let issued = Flags(rawValue: 1)
        static let repeating = Flags(rawValue: 2)
        static let executedOnce = Flags(rawValue: 4)
        static let executedRepeating = Flags(rawValue: 8)
        static let cancelled = Flags(rawValue: 16)
        static let afterTerminal = Flags(rawValue: 32)
        static let secondTerminal = Flags(rawValue: 64)
        static let terminal: Flags = [.executedOnce, .cancelled]
    }

    private struct Ledger {
        var flags: [Flags] = []
        var executed = 0
        var cancelled = 0

        mutating func update(_ id: TimerScheduler.TimerID, _ body: (inout Flags) -> Void) {
            let index = Int(id.rawValue)
            if index >= self.flags.count {
                self.flags.append(
                    contentsOf: repeatElement([], count: max(index + 1 - self.flags.count, self.flags.count)))
            }
            body(&self.flags[index])
        }
    }

    let name = "scheduler"
    let operationNames = Operation.allCases.map { "\($0)" }
    private let weights = Operation.allCases.map(\.weight)
    private let totalWeight = Operation.allCases.reduce(0) { $0 + $1.weight }

    private let engine: TimerEngine
    private let scheduler: LockedCondition<TimerScheduler?>
    private let ids = LockedCondition<[TimerScheduler.TimerID]>([])
    private let ledger = LockedCondition(Ledger())
    private let cancelReturns = Atomic<Int>(0)
    private let drained = DispatchSemaphore(value: 0)
    private let violations: StressViolations

    init(engine: TimerEngine, violations: StressViolations) {
        let scheduler = TimerScheduler(backend: .engine(engine))
        self.engine = engine
        self.scheduler = LockedCondition(scheduler)
        self.violations = violations
        let events = scheduler.events
        let ledger = self.ledger
        let drained = self.drained
        Task.detached {
            for await event in events {
                ledger.withLock { ledger in
                    ledger.update(event.id) { flags in
                        let wasTerminal = !flags.isDisjoint(with: .terminal)
                        switch event {
                        case .executed(_, willRepeat: true):
                            flags.insert(.executedRepeating)
                        case .executed(_, willRepeat: false):
                            flags.insert(.executedOnce)
                        case .cancelled:
                            flags.insert(.cancelled)
                        }
                        if wasTerminal {
                            flags.insert(.afterTerminal)
                            if event != .executed(event.id, willRepeat: true) { flags.insert(.secondTerminal) }
                        }
                    }
                    if case .cancelled = event { ledger.cancelled += 1 } else { ledger.executed += 1 }
                }
            }
            drained.signal()
        }
    }

    func step(_ random: inout SplitMix64) -> Int {
        let operation = Operation(rawValue: random.pick(weights: self.weights, total: self.totalWeight))!
        guard let scheduler = self.scheduler.withLock({ $0 }) else { return operation.rawValue }
        switch operation {
        case .schedule:
            let repeating = random.next(below: 10) < 3
            let delay = Duration.nanoseconds(random.nanoseconds(in: StressTimerPool.delay))
            let period = repeating ? Duration.nanoseconds(random.nanoseconds(in: StressTimerPool.period)) : nil
            let id = scheduler.schedule(after: delay, every: period)
            self.ledger.withLock { $0.update(id) { $0.insert(repeating ? [.issued, .repeating] : .issued) } }
            // A full list makes room by cancelling a random id, so repeating timers stay few.
            let evicted = self.ids.withLock { ids -> TimerScheduler.TimerID? in
                ids.append(id)
                guard ids.count > Self.tracked else { return nil }
                ids.swapAt(Int(random.next(below: Int64(ids.count))), ids.count - 1)
                return ids.removeLast()
            }
            if let evicted, scheduler.cancel(evicted) { self.cancelReturns.add(1, ordering: .relaxed) }
        case .cancel:
            let id = self.ids.withLock { ids -> TimerScheduler.TimerID? in
                guard !ids.isEmpty else { return nil }
                ids.swapAt(Int(random.next(below: Int64(ids.count))), ids.count - 1)
                return ids.removeLast()
            }
            if let id, scheduler.cancel(id) { self.cancelReturns.add(1, ordering: .relaxed) }
        case .cancelSet:
            // Up to 8 ids; some stay listed, so later cancels hit finished or cancelled ids too.
            let count = Int(random.next(below: 8)) + 1
            let chosen = self.ids.withLock { ids -> [TimerScheduler.TimerID] in
                guard !ids.isEmpty else { return [] }
                var chosen: [TimerScheduler.TimerID] = []
                for _ in 0..<count {
                    let index = Int(random.next(below: Int64(ids.count)))
                    chosen.append(ids[index])
                    if random.next(below: 2) == 0, ids.count > 1 {
                        ids.swapAt(index, ids.count - 1)
                        ids.removeLast()
                    }
                }
                return chosen
            }
            self.cancelReturns.add(scheduler.cancel(chosen), ordering: .relaxed)
        case .activeTimers:
            _ = scheduler.activeTimers.count
        }
        return operation.rawValue
    }

    func finish(operations: [Int], seconds: Double) -> StressResult {
        if let scheduler = self.scheduler.withLock({ $0 }) {
            self.cancelReturns.add(scheduler.cancelAll(), ordering: .relaxed)
        }
        // The last reference: its deinit finishes the event stream behind every queued event.
        // Released at the end of this block, outside the lock (a local lives to its scope's end
        // in a debug build).
        do {
            let last = self.scheduler.withLock { scheduler in
                defer { scheduler = nil }
                return scheduler
            }
            withExtendedLifetime(last) {}
        }
        if self.drained.wait(timeout: .now() + 10) == .timedOut {
            self.violations.record(.stall, subject: self.name, "the event stream did not finish within 10 s")
        }
        self.audit()
        if !eventually(timeout: .seconds(5), { self.engine.counters.armed == 0 }) {
            let armed = self.engine.counters.armed
            self.violations.record(.engineArmed, subject: self.name, "\(armed) timers still armed")
        }
        let (executed, cancelled) = self.ledger.withLock { ($0.executed, $0.cancelled) }
        let fired = self.engine.counters.fired
        if fired < UInt64(executed) {
            self.violations.record(.engineFired, subject: self.name, "fired \(fired) < \(executed) executed events")
        }
        self.engine.syncShutdown()
        return StressResult(
            backend: self.name,
            seconds: seconds,
            operationsByKind: self.operationsByKind(operations),
            handlerEntries: executed,
            cancelledEvents: cancelled,
            violations: self.violations.counts(subject: self.name),
            engineCounters: self.engine.counters
        )
    }

    private func audit() {
        let (flags, cancelled) = self.ledger.withLock { ($0.flags, $0.cancelled) }
        for (index, flag) in flags.enumerated() where !flag.isEmpty {
            let id = TimerScheduler.TimerID(rawValue: UInt64(index))
            let kind = flag.contains(.repeating) ? "repeating" : "one-shot"
            guard flag.contains(.issued) else {
                self.violations.record(.schedulerOrder, subject: self.name, "events for \(id), never issued")
                continue
            }
            let terminals = (flag.contains(.executedOnce) ? 1 : 0) + (flag.contains(.cancelled) ? 1 : 0)
            let wrongKind = flag.contains(.repeating) ? flag.contains(.executedOnce) : flag.contains(.executedRepeating)
            if terminals != 1 || flag.contains(.secondTerminal) {
                self.violations.record(.schedulerTerminal, subject: self.name, "\(kind) \(id): flags \(flag.rawValue)")
            } else if flag.contains(.repeating) && !flag.contains(.cancelled) {
                self.violations.record(.schedulerTerminal, subject: self.name, "\(kind) \(id) never cancelled")
            }
            if wrongKind || flag.contains(.afterTerminal) {
                self.violations.record(.schedulerOrder, subject: self.name, "\(kind) \(id): flags \(flag.rawValue)")
            }
        }
        let returns = self.cancelReturns.load(ordering: .relaxed)
        if returns != cancelled {
            self.violations.record(
                .schedulerCancelCount, subject: self.name,
                "cancel returned true \(returns)×, \(cancelled) cancelled events")
        }
    }
}
