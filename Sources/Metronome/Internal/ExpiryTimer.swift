import Synchronization

/// What an ``ExpiringValue`` is made of: its value, its expiry and its one arming on the
/// firing seam, which is also where that arming's firings go.
///
/// Two atomic words and no lock, no ``SafeDispatchTimer``, no closure per value: a million
/// live values then cost little more than their C timers. `expiry` decides between a
/// touch and the expiry; `arming` names the one arming whose firings count. A firing that
/// re-arms hands `arming` to the successor by compare-exchange, and an end takes it with an
/// exchange, so whichever comes second disarms what the other left: no arming outlives an
/// end, and none fires for a value that ended.
///
/// The seam holds this object while an arming lives, the ``ExpiringValue`` while its owner
/// does: releasing the container ends the value and its arming.
// Unchecked only because its superclass cannot be checked: every stored property is a `let`
// of a Sendable type.
final class ExpiryTimer<Value: Sendable>: FiringReceiver, @unchecked Sendable {
    // What a touch reads comes first, beside the object header: with a million values a
    // touch is a cache miss, and these fields then share it.

    /// The instant the value expires, in nanoseconds on the backend's monotonic clock, or
    /// ``ended`` once it expired or was ended. It only moves later, and ``ended`` is final.
    private let expiry: Atomic<Int64>

    let lifetimeNanoseconds: Int64

    let firing: any TimerFiring

    /// The arming whose firings count, or ``none`` before the first and after the last.
    private let arming: Atomic<UInt64>

    private let onExpiry: @Sendable (Value) -> Void

    /// Read only while ``expiry`` is not ended, and then by whoever ended it: immutable, so
    /// reading it takes no lock.
    let content: Value

    /// The mark for "expired or ended"; no expiry reaches it, as a lifetime is never negative.
    private static var ended: Int64 { .min }

    /// No arming: every id a seam hands out is another (the engine's carry an odd
    /// generation in their upper half, a backend's count from 1).
    private static var none: UInt64 { 0 }

    /// Stores `value` and arms its first expiry.
    init(
        _ value: Value, lifetimeNanoseconds: Int64, firing: any TimerFiring,
        onExpiry: @escaping @Sendable (Value) -> Void
    ) {
        self.expiry = Atomic(firing.now(.monotonic).addingSaturating(lifetimeNanoseconds))
        self.lifetimeNanoseconds = lifetimeNanoseconds
        self.firing = firing
        self.arming = Atomic(Self.none)
        self.onExpiry = onExpiry
        self.content = value
        super.init(queue: nil)
        self.start()
    }

    /// Arms the first expiry. A seam that arms no more leaves the value to live until it
    /// is ended.
    private func start() {
        guard let schedule = self.schedule(at: self.expiry.load(ordering: .relaxed)),
            let arming = try? self.firing.reserve(for: self)
        else { return }
        // Recorded before it starts: its first firing may come at once, on another thread.
        self.arming.store(arming, ordering: .relaxed)
        do {
            try self.firing.start(arming, schedule, clock: .monotonic)
        } catch {
            self.retire(arming)
        }
    }

    /// Repeating, so that the arming stays the value's after it fired: a firing that
    /// finds the value touched moves it. The period is only a fallback, for a re-arm the
    /// seam refused; each firing re-arms for the recorded expiry or ends the value.
    private func schedule(at deadline: Int64) -> TimerSchedule? {
        TimerSchedule(deadlineNanoseconds: deadline, periodNanoseconds: max(self.lifetimeNanoseconds, 1))
    }

    var isExpired: Bool {
        self.expiry.load(ordering: .relaxed) == Self.ended
    }

    func touch() -> Bool {
        let expiry = self.firing.now(.monotonic).addingSaturating(self.lifetimeNanoseconds)
        var recorded = self.expiry.load(ordering: .relaxed)
        // Every change to the word is a compare-exchange against what was read, so an end
        // that slipped in between makes the exchange fail instead of being overwritten.
        while recorded != Self.ended {
            // A concurrent touch that read the clock later already covers this one.
            if recorded >= expiry { return true }
            let (exchanged, current) = self.expiry.compareExchange(
                expected: recorded,
                desired: expiry,
                ordering: .relaxed
            )
            if exchanged { return true }
            recorded = current
        }
        return false
    }

    /// Ends the value without `onExpiry`, and disarms it.
    ///
    /// - Returns: Whether this call ended it (it had neither expired nor been ended).
    func end() -> Bool {
        let ended = self.expiry.exchange(Self.ended, ordering: .relaxed) != Self.ended
        let arming = self.arming.exchange(Self.none, ordering: .relaxed)
        if arming != Self.none { self.firing.disarm(arming) }
        return ended
    }

    /// A firing: `fired` is never later than the present, so a decision to end on it is
    /// never early.
    override func receive(_ tick: Tick, from arming: UInt64) {
        // An arming already replaced or ended: its successor or the end owns the value.
        guard self.arming.load(ordering: .relaxed) == arming else { return }
        let now = tick.fired.nanoseconds
        var recorded = self.expiry.load(ordering: .relaxed)
        while recorded != Self.ended {
            if now < recorded {
                // Touched since it was armed: wait for the rest. A touch meanwhile only
                // moves the expiry later, which the next firing sees.
                self.rearm(arming, at: recorded)
                return
            }
            let (exchanged, current) = self.expiry.compareExchange(
                expected: recorded,
                desired: Self.ended,
                ordering: .relaxed
            )
            if exchanged {
                self.retire(arming)
                self.onExpiry(self.content)
                return
            }
            recorded = current
        }
        self.retire(arming)
    }

    /// Moves the value's arming to `deadline`: in place where the seam can (the engine, in
    /// O(1) for a later deadline), otherwise by a new arming that replaces it.
    private func rearm(_ arming: UInt64, at deadline: Int64) {
        guard let schedule = self.schedule(at: deadline) else { return }
        let successor: UInt64
        do {
            if let moved = try self.firing.move(arming, schedule, clock: .monotonic) {
                self.handOver(arming, to: moved)
                return
            }
            successor = try self.firing.reserve(for: self)
        } catch {
            // The arming keeps its schedule, and its period brings the next firing.
            return
        }
        guard self.handOver(arming, to: successor) else { return }
        self.firing.disarm(arming)
        do {
            try self.firing.start(successor, schedule, clock: .monotonic)
        } catch {
            self.retire(successor)
        }
    }

    /// Makes `successor` the value's arming unless an end took `arming` first, in which
    /// case `successor` is disarmed here.
    @discardableResult
    private func handOver(_ arming: UInt64, to successor: UInt64) -> Bool {
        guard self.arming.compareExchange(expected: arming, desired: successor, ordering: .relaxed).exchanged else {
            self.firing.disarm(successor)
            return false
        }
        return true
    }

    /// Disarms `arming` unless an end took it first (and disarmed it).
    private func retire(_ arming: UInt64) {
        if self.arming.compareExchange(expected: arming, desired: Self.none, ordering: .relaxed).exchanged {
            self.firing.disarm(arming)
        }
    }
}
