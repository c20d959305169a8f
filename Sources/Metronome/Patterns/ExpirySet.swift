import Synchronization

/// The values due in one slot, never empty (the head of their list, an unretained
/// ``ExpiringValue``), and the one-shot timer that fires for them, `nil` when the backend
/// refused it. Not generic, so that the table of slots is specialised code, not the generic
/// dictionary's.
private struct ExpirySlot {
    var head: UnsafeMutableRawPointer
    var timer: TimerCore?
}

/// The expiry timers of one backend's ``ExpiringValue``s of one type (on an engine, those
/// made on the threads of one of its shards): values due in the same slot of time share
/// that slot's one timer, so a value costs two links and no timer of its own.
///
/// A value sits in the list of the slot its expiry falls in, the expiry rounded up to
/// ``granularity``. A touch changes only the value's expiry word. The slot's firing ends
/// each value whose expiry has passed and moves every other one to the slot of its new
/// expiry: a move per lifetime, not per touch, and never an early end. On an engine a slot is
/// a millisecond, so a value ends up to a millisecond after its expiry (plus the engine's
/// own lateness); on other backends every instant is its own slot.
///
/// The lists run through the values themselves and do not retain them: a value unlinks
/// itself under this set's lock when it is ended or released. Nothing here ever takes a
/// reference to a value, not even for a moment: its owner may let go meanwhile, and the
/// last release, here under the lock, would run its deinit, which takes the lock. A
/// firing copies out what an expired value's handler needs before it lets go of the lock,
/// because a release may be waiting on the lock to free that value.
final class ExpirySet<Value: Sendable>: Sendable {
    typealias Entry = ExpiringValue<Value>
    /// A value in a list, reached without a reference (see above).
    typealias Link = Unmanaged<Entry>

    /// What an expired value's handler needs, copied out under the lock.
    private struct Expiry {
        let onExpiry: @Sendable (Value) -> Void
        let content: Value
    }

    /// Slots by their instant, in nanoseconds on the backend's monotonic clock.
    private let slots = LockedBox([Int64: ExpirySlot]())
    let firing: any TimerFiring
    private let granularity: Int64

    /// The slot of a value in no list.
    static var unlinked: Int64 { .min }

    /// Values expired or moved under one hold of the lock: a slot of a million values must
    /// not keep every release and creation waiting while it is worked through.
    private static var batch: Int { 256 }

    init(firing: any TimerFiring, granularity: Int64) {
        self.firing = firing
        self.granularity = granularity
    }

    func now() -> Int64 {
        self.firing.now(.monotonic)
    }

    /// Links a new value into the slot of its expiry.
    ///
    /// - Returns: Whether a timer will expire it: `false` when the backend refused the
    ///   slot's timer (an engine that was shut down), and the value is left out.
    func insert(_ entry: Entry) -> Bool {
        // A copy of a dead engine arms nothing, and a thread the fork left behind may have
        // held this lock.
        guard !self.firing.isInherited else { return false }
        let expiry = entry.expiry.load(ordering: .relaxed)
        let slot = self.slot(of: expiry)
        let emptied = self.slots.withLockedValue { slots -> TimerCore?? in
            self.link(.passUnretained(entry), into: slot, of: &slots)
            guard slots[slot]?.timer == nil else { return .none }
            return .some(self.unlink(.passUnretained(entry), from: &slots))
        }
        guard let emptied else { return true }
        emptied?.ownerGone()
        return false
    }

    /// Unlinks a value that was ended or released: nothing fires for it afterwards.
    func remove(_ entry: Entry) {
        guard !self.firing.isInherited else { return }
        let emptied = self.slots.withLockedValue { slots in self.unlink(.passUnretained(entry), from: &slots) }
        emptied?.ownerGone()
    }

    /// The firing of `slot`'s timer `timer`: ends its values that expired and moves the
    /// touched ones on, a batch at a time; each batch's handlers run outside the lock.
    private func expire(_ slot: Int64, _ tick: Tick, by timer: ObjectIdentifier) {
        // Never later than the present, so an end decided on it is never early.
        let now = tick.fired.nanoseconds
        var more = true
        while more {
            var expired: [Expiry] = []
            var emptied: TimerCore?
            more = self.slots.withLockedValue { slots in
                // Gone or replaced: emptied by releases, and maybe made anew since.
                guard let index = slots.index(forKey: slot),
                    slots.values[index].timer.map(ObjectIdentifier.init) == timer
                else { return false }
                var entry: Link? = Link.fromOpaque(slots.values[index].head)
                for _ in 0..<Self.batch {
                    guard let current = entry else { break }
                    entry = current._withUnsafeGuaranteedRef { current in
                        defer { (current.slot, current.previous, current.next) = (Self.unlinked, nil, nil) }
                        return current.next
                    }
                    switch current._withUnsafeGuaranteedRef({ Self.decide($0, now: now) }) {
                    case .expired:
                        expired.append(
                            current._withUnsafeGuaranteedRef { Expiry(onExpiry: $0.onExpiry, content: $0.content) })
                    case .later(let expiry):
                        // Past this slot even if the backend fired it early.
                        let next = max(self.slot(of: expiry), slot.addingSaturating(self.granularity))
                        self.link(current, into: next, of: &slots)
                    case .ended:
                        break
                    }
                }
                guard let entry else {
                    emptied = slots.removeValue(forKey: slot)?.timer
                    return false
                }
                entry._withUnsafeGuaranteedRef { $0.previous = nil }
                slots[slot]?.head = entry.toOpaque()
                return true
            }
            // The fired timer is spent, but its backend holds it until it is retired.
            emptied?.ownerGone()
            for expiry in expired { expiry.onExpiry(expiry.content) }
        }
    }

    private enum Decision {
        case expired
        case later(Int64)
        case ended
    }

    /// Ends `entry` if its expiry has passed, by the same compare-exchange a touch uses, so
    /// that one of them wins.
    private static func decide(_ entry: Entry, now: Int64) -> Decision {
        var recorded = entry.expiry.load(ordering: .relaxed)
        while recorded != Entry.ended {
            if now < recorded { return .later(recorded) }
            let (exchanged, current) = entry.expiry.compareExchange(
                expected: recorded, desired: Entry.ended, ordering: .relaxed)
            if exchanged { return .expired }
            recorded = current
        }
        return .ended
    }

    /// The slot `expiry` falls in: the first instant of the granularity at or after it.
    private func slot(of expiry: Int64) -> Int64 {
        let (rounded, overflow) = expiry.addingReportingOverflow(self.granularity - 1)
        // No slot before 0, which no schedule can hold: a value expiring before 0 (on a
        // virtual timeline standing there) expires at 0, late rather than never.
        return overflow ? .max : max(rounded - rounded % self.granularity, 0)
    }

    /// Puts `entry` at the head of `slot`'s list; a new slot's timer is armed here, under the
    /// lock, so that its firing finds it. One the backend refuses leaves its values to live
    /// until they are ended.
    private func link(_ entry: Link, into slot: Int64, of slots: inout [Int64: ExpirySlot]) {
        let index = slots.index(forKey: slot)
        let head = index.map { Link.fromOpaque(slots.values[$0].head) }
        entry._withUnsafeGuaranteedRef { entry in
            entry.slot = slot
            entry.previous = nil
            entry.next = head
        }
        if let index, let head {
            head._withUnsafeGuaranteedRef { $0.previous = entry }
            slots.values[index].head = entry.toOpaque()
            return
        }
        let timer = TimerCore.make(delivery: nil, firing: self.firing, clock: .monotonic)
        // The timer's identity, not the timer: its handler must not keep it.
        let id = ObjectIdentifier(timer)
        let armed = TimerSchedule(deadlineNanoseconds: slot).flatMap { schedule in
            try? timer.schedule(schedule) { [self] tick in self.expire(slot, tick, by: id) }
        }
        slots[slot] = ExpirySlot(head: entry.toOpaque(), timer: armed == true ? timer : nil)
    }

    /// Takes `entry` out of its list; returns the timer of the slot it emptied, which the
    /// caller retires once the lock is let go.
    private func unlink(_ entry: Link, from slots: inout [Int64: ExpirySlot]) -> TimerCore? {
        let (slot, previous, next) = entry._withUnsafeGuaranteedRef { entry in
            defer { (entry.slot, entry.previous, entry.next) = (Self.unlinked, nil, nil) }
            return (entry.slot, entry.previous, entry.next)
        }
        guard slot != Self.unlinked else { return nil }
        next?._withUnsafeGuaranteedRef { $0.previous = previous }
        if let previous {
            previous._withUnsafeGuaranteedRef { $0.next = next }
        } else if let next {
            slots[slot]?.head = next.toOpaque()
        } else {
            return slots.removeValue(forKey: slot)?.timer
        }
        return nil
    }

}

extension ExpirySet {
    /// The set a new ``ExpiringValue`` on `backend` joins: the engine's for its shard, shared
    /// and slotted (see TimerEngine+ExpirySets.swift); on any other backend, or where the
    /// engine is compiled out, a set of the value's own that arms each expiry instant as it is.
    static func joined(on backend: SafeDispatchTimer.Backend) -> ExpirySet<Value> {
        #if Engine
        if case .engine(let engine) = backend { return engine.expirySet(of: Value.self) }
        #endif
        return ExpirySet(firing: backend.firing, granularity: 1)
    }
}
