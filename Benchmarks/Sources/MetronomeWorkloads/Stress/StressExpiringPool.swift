import Metronome
import MetronomeMeasurements
import Synchronization

/// What the stress threads know about one `ExpiringValue`, kept apart from it so that the
/// audit outlives the value. Guarded by the pool's ledger lock.
private struct StressExpiry {
    let lifetime: Int64
    /// The clock read before the value was made, then before each touch that returned `true`:
    /// the latest is when its last lifetime began at the earliest.
    var lifeStart: Int64
    var expiredAt: Int64 = 0
    var expiries: UInt8 = 0
    var invalidateWon = false
}

/// A slot's value, with its id readable after it ended.
private struct StressHeld {
    let value: ExpiringValue<StressSession>
    let id: Int
}

/// What a value holds: its id, counted in ``StressLiveObjects`` so that a value the library
/// never frees shows up at the end.
private final class StressSession: Sendable {
    let id: Int
    private let live: StressLiveObjects

    init(id: Int, live: StressLiveObjects) {
        self.id = id
        self.live = live
        live.retain()
    }

    deinit {
        self.live.release()
    }
}

/// `ExpiringValue`s on an engine of their own, created, touched, invalidated and released at
/// random from every thread while their lifetimes (0–3 ms) run out and they move on to
/// later milliseconds.
///
/// Audited at the end: no value expired twice, none after an `invalidate()` that returned
/// it, none before its lifetime had passed since its creation or last successful touch;
/// every value freed and nothing left armed once the pool is released.
final class StressExpiringPool: StressSubject {
    enum Operation: Int, CaseIterable {
        case create, touch, invalidate, read, drop

        var weight: Int {
            switch self {
            case .create: 20
            case .touch: 50
            case .invalidate: 10
            case .read: 10
            case .drop: 10
            }
        }
    }

    let name = "expiring-value"
    let operationNames = Operation.allCases.map { "\($0)" }
    private let weights = Operation.allCases.map(\.weight)
    private let totalWeight = Operation.allCases.reduce(0) { $0 + $1.weight }

    private let engine: TimerEngine
    private let slots: [LockedCondition<StressHeld?>]
    private let ledger = LockedCondition<[StressExpiry]>([])
    private let live = StressLiveObjects()
    private let violations: StressViolations

    init(engine: TimerEngine, values: Int, violations: StressViolations) {
        self.engine = engine
        self.slots = (0..<values).map { _ in LockedCondition(nil) }
        self.violations = violations
    }

    func step(_ random: inout SplitMix64) -> Int {
        let operation = Operation(rawValue: random.pick(weights: self.weights, total: self.totalWeight))!
        let slot = self.slots[Int(random.next(below: Int64(self.slots.count)))]
        switch operation {
        case .create:
            Self.replace(slot, with: self.makeValue(lifetime: random.nanoseconds(in: StressTimerPool.delay)))
        case .touch:
            guard let held = slot.withLock({ $0 }) else { break }
            let start = MonotonicTime.now()
            // A touch that won began a lifetime no earlier than `start`, which any later
            // expiry must have waited out, even one that came before this record.
            if held.value.touch() {
                self.ledger.withLock { $0[held.id].lifeStart = max($0[held.id].lifeStart, start) }
            }
        case .invalidate:
            guard let held = slot.withLock({ $0 }), held.value.invalidate() != nil else { break }
            self.ledger.withLock { $0[held.id].invalidateWon = true }
        case .read:
            guard let held = slot.withLock({ $0 }) else { break }
            _ = (held.value.value, held.value.isExpired, held.value.lifetime)
        case .drop:
            Self.replace(slot, with: nil)
        }
        return operation.rawValue
    }

    /// Puts `held` in `slot` and releases what the slot held outside its lock: a value's
    /// deinit calls the engine.
    private static func replace(_ slot: LockedCondition<StressHeld?>, with held: StressHeld?) {
        let replaced = slot.withLock { current -> StressHeld? in
            defer { current = held }
            return current
        }
        withExtendedLifetime(replaced) {}
    }

    private func makeValue(lifetime: Int64) -> StressHeld {
        let start = MonotonicTime.now()
        let id = self.ledger.withLock { ledger in
            ledger.append(StressExpiry(lifetime: lifetime, lifeStart: start))
            return ledger.count - 1
        }
        let ledger = self.ledger
        let value = ExpiringValue(
            StressSession(id: id, live: self.live), lifetime: .nanoseconds(lifetime), backend: .engine(self.engine)
        ) {
            session in
            let now = MonotonicTime.now()
            ledger.withLock { ledger in
                ledger[session.id].expiries &+= 1
                ledger[session.id].expiredAt = now
            }
        }
        return StressHeld(value: value, id: id)
    }

    func finish(operations: [Int], seconds: Double) -> StressResult {
        for slot in self.slots { Self.replace(slot, with: nil) }
        if !eventually(seconds: 5, { self.engine.counters.armed == 0 }) {
            let armed = self.engine.counters.armed
            self.violations.record(.engineArmed, subject: self.name, "\(armed) values still armed")
        }
        if !eventually(seconds: 5, { self.live.liveCount == 0 }) {
            self.violations.record(.liveContexts, subject: self.name, count: self.live.liveCount, "values never freed")
        }
        let ledger = self.ledger.withLock { $0 }
        self.audit(ledger)
        let counters = self.engine.counters
        self.engine.syncShutdown()
        return StressResult(
            backend: self.name,
            seconds: seconds,
            operationsByKind: self.operationsByKind(operations),
            handlerEntries: ledger.reduce(0) { $0 + Int($1.expiries) },
            handlerContexts: self.live.createdCount,
            violations: self.violations.counts(subject: self.name),
            engineCounters: counters
        )
    }

    private func audit(_ ledger: [StressExpiry]) {
        for (id, value) in ledger.enumerated() where value.expiries > 0 {
            if value.expiries > 1 {
                self.violations.record(.expiredTwice, subject: self.name, "value \(id) expired \(value.expiries)×")
            }
            if value.invalidateWon {
                self.violations.record(.expiredAfterInvalidate, subject: self.name, "value \(id)")
            }
            let due = value.lifeStart + value.lifetime
            if value.expiredAt < due {
                self.violations.record(
                    .early, subject: self.name, "value \(id) expired \(due - value.expiredAt) ns early")
            }
        }
    }
}
