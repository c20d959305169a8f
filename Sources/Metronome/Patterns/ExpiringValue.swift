import Synchronization

/// A value that expires after a lifetime without use: a time-limited container.
///
/// A ``touch()`` only records the new expiry instant in one atomic word: no lock, no
/// allocation and no call into the engine, so touching on every request costs about a clock
/// read. The value waits in the list of the millisecond its expiry falls in, and all the
/// values of one type due in that millisecond share one engine timer. When it fires and
/// finds a value touched meanwhile, it moves the value to the millisecond of its new expiry:
/// one move per lifetime, not per touch. The container is one small object, with no lock, no
/// timer and no ``SafeDispatchTimer`` of its own; its creation and its release take its
/// list's lock for a moment: on an engine, the lock of the values of its type made on
/// threads of the same engine shard.
///
/// The price of sharing is precision: on an engine a value ends up to a millisecond after its
/// lifetime (and the engine's own lateness), never before. On any other backend each expiry
/// instant is armed as it is.
///
/// A touch racing the expiry resolves one way only, because both change the same word: the
/// expiry replaces the instant it found past with an "expired" mark, and only if no touch
/// replaced that instant first. Either the touch wins (it returns `true`, the value stays
/// and lives ``lifetime`` from the touch) or the expiry wins (the touch returns `false` and
/// `onExpiry` runs exactly once). The value never expires before ``lifetime`` has passed
/// since its creation or its last successful touch.
///
/// The container holds the value until it is released, also after it expired or was
/// invalidated, so that reading or ending it takes no lock: release the container (as an
/// `onExpiry` that removes it from its table does) to free the value.
///
/// `onExpiry` runs where the backend fires (for an engine, its firing thread): keep it
/// short, or hand the work to a queue. It may touch or read this container (which will have
/// expired).
///
/// ```swift
/// let session = ExpiringValue(Session(user: id), lifetime: .seconds(30)) { session in
///     session.close()
/// }
/// func handle(_ request: Request) {
///     guard let current = session.value, session.touch() else { return reject(request) }
///     current.serve(request)
/// }
/// ```
public final class ExpiringValue<Value: Sendable>: @unchecked Sendable {
    // What a touch reads comes first, beside the object header: with a million values a
    // touch is a cache miss, and these fields then share it.

    /// The instant the value expires, in nanoseconds on the backend's monotonic clock, or
    /// ``ended`` once it expired or was ended. It only moves later, and ``ended`` is final.
    let expiry: Atomic<Int64>

    let lifetimeNanoseconds: Int64

    /// Where the value waits for its expiry; it keeps the backend.
    private let set: ExpirySet<Value>

    // The value's place in its set, read and written only under the set's lock: the one
    // reason this class is `@unchecked Sendable`, and why no access needs checking.

    /// The slot whose list holds the value, or `ExpirySet.unlinked`.
    @exclusivity(unchecked) var slot = ExpirySet<Value>.unlinked
    @exclusivity(unchecked) var previous: ExpirySet<Value>.Link?
    @exclusivity(unchecked) var next: ExpirySet<Value>.Link?

    let onExpiry: @Sendable (Value) -> Void

    /// Read only while ``expiry`` is not ended, and then by whoever ended it: immutable, so
    /// reading it takes no lock.
    let content: Value

    /// The mark for "expired or ended". No expiry is allowed to reach it: on a virtual
    /// timeline standing at `Int64.min` one would, so it is kept one above.
    static var ended: Int64 { .min }

    /// The expiry of a value `lifetime` nanoseconds after `now`: saturated, and never the
    /// mark ``ended``.
    private static func expiry(after lifetime: Int64, from now: Int64) -> Int64 {
        max(now.addingSaturating(lifetime), Self.ended + 1)
    }

    /// How long the value lives after creation or its last ``touch()``: the lifetime given,
    /// with a negative one counted as zero and one past `Int64` nanoseconds (about 292
    /// years) cut to that.
    public var lifetime: Duration {
        .nanoseconds(self.lifetimeNanoseconds)
    }

    /// What the expiry timer runs on.
    public var backend: SafeDispatchTimer.Backend {
        SafeDispatchTimer.Backend(firing: self.set.firing)
    }

    /// Stores `value` and starts its lifetime, with its expiry timer on `engine`.
    ///
    /// - Parameters:
    ///   - value: The value to keep.
    ///   - lifetime: How long the value lives without a ``touch()``; zero or negative
    ///     expires it at the engine's next millisecond (on the engine's thread).
    ///   - engine: The engine that runs the expiry timer.
    ///   - onExpiry: Called once with the value when it expires. Not called after
    ///     ``invalidate()``, nor when the container is released first.
    @available(*, deprecated, message: "Use `init(_:lifetime:backend:onExpiry:)` with `backend: .engine(engine)`")
    public convenience init(
        _ value: Value,
        lifetime: Duration,
        engine: TimerEngine,
        onExpiry: @escaping @Sendable (Value) -> Void = { _ in }
    ) {
        self.init(value, lifetime: lifetime, backend: .engine(engine), onExpiry: onExpiry)
    }

    /// Stores `value` and starts its lifetime, with its expiry timer on `backend`.
    ///
    /// On `.custom(timeline)` (a `MetronomeTesting.ManualTimeline`) the value expires when
    /// the timeline is advanced past its lifetime, on the advancing thread.
    ///
    /// - Parameters:
    ///   - value: The value to keep.
    ///   - lifetime: How long the value lives without a ``touch()``; zero or negative
    ///     expires it at once (where the backend fires; on an engine, at its next
    ///     millisecond).
    ///   - backend: What runs the expiry timer; the shared engine by default.
    ///   - onExpiry: Called once with the value when it expires. Not called after
    ///     ``invalidate()``, nor when the container is released first, nor for a value
    ///     whose backend cannot arm its timer (an engine that was shut down): that value is
    ///     expired from the start (``isExpired`` is `true`, ``touch()`` returns `false`).
    public init(
        _ value: Value,
        lifetime: Duration,
        backend: SafeDispatchTimer.Backend = .engine(.shared),
        onExpiry: @escaping @Sendable (Value) -> Void = { _ in }
    ) {
        let set = ExpirySet<Value>.joined(on: backend)
        let lifetime = max(lifetime, .zero).saturatingNanoseconds
        self.expiry = Atomic(Self.expiry(after: lifetime, from: set.now()))
        self.lifetimeNanoseconds = lifetime
        self.set = set
        self.onExpiry = onExpiry
        self.content = value
        if !set.insert(self) { self.expiry.store(Self.ended, ordering: .relaxed) }
    }

    deinit {
        self.end()
    }

    /// The value, or `nil` once it has expired or was invalidated.
    public var value: Value? {
        self.isExpired ? nil : self.content
    }

    /// Whether the value has expired or was invalidated.
    public var isExpired: Bool {
        self.expiry.load(ordering: .relaxed) == Self.ended
    }

    /// Starts a new lifetime from now.
    ///
    /// Lock-free and allocation-free: it reads the clock and stores the new expiry, leaving
    /// the timer where it is.
    ///
    /// - Returns: `true` if the value was still there (it now lives ``lifetime`` from now);
    ///   `false` if it had already expired or was invalidated, in which case nothing changes.
    @discardableResult
    public func touch() -> Bool {
        let expiry = Self.expiry(after: self.lifetimeNanoseconds, from: self.set.now())
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

    /// Ends the value without calling `onExpiry`, and takes it out of its list.
    ///
    /// - Returns: The value, or `nil` if it had already expired or was invalidated.
    @discardableResult
    public func invalidate() -> Value? {
        self.end() ? self.content : nil
    }

    /// Ends the value without `onExpiry` and takes it out of its set.
    ///
    /// - Returns: Whether this call ended it (it had neither expired nor been ended).
    @discardableResult
    private func end() -> Bool {
        let ended = self.expiry.exchange(Self.ended, ordering: .relaxed) != Self.ended
        self.set.remove(self)
        return ended
    }
}
