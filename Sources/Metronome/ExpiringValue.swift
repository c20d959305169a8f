import Synchronization

/// A value that expires after a lifetime without use: a time-limited container.
///
/// A ``touch()`` only records the new expiry instant in one atomic word: no lock, no
/// allocation and no call into the engine, so touching on every request costs about a clock
/// read. The container's one timer stays armed for the expiry it last saw; when it fires
/// before the recorded expiry (the value was touched meanwhile), it re-arms itself for the
/// rest of the lifetime.
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
public final class ExpiringValue<Value: Sendable>: Sendable {
    // What a touch reads comes first, beside the object header: with a million values a
    // touch is a cache miss on its value, and these fields then share that miss; the value,
    // of any size, comes last.

    /// The instant the value expires, in nanoseconds on the monotonic clock as the backend
    /// reads it, or ``ended`` once it expired or was invalidated. It only moves later, and
    /// ``ended`` is final.
    private let expiry: Atomic<Int64>

    /// The mark for "expired or invalidated"; no expiry reaches it, as a lifetime is never
    /// negative.
    private static var ended: Int64 { .min }

    private let lifetimeNanoseconds: Int64

    /// Reads the backend's monotonic clock: virtual time on a test double.
    private let now: @Sendable () -> Int64

    private let timer: SafeDispatchTimer

    private let onExpiry: @Sendable (Value) -> Void

    /// Read only while ``expiry`` is not ended, and then by whoever ended it: immutable, so
    /// reading it takes no lock. Held until the container is released.
    private let content: Value

    /// How long the value lives after creation or its last ``touch()``: the lifetime given,
    /// with a negative one counted as zero and one past `Int64` nanoseconds (about 292
    /// years) cut to that.
    public var lifetime: Duration {
        .nanoseconds(self.lifetimeNanoseconds)
    }

    /// What the expiry timer runs on.
    public var backend: SafeDispatchTimer.Backend {
        self.timer.backend
    }

    /// The engine the expiry timer runs on; `nil` when ``backend`` is not an engine.
    public var engine: TimerEngine? {
        self.backend.engine
    }

    /// Stores `value` and starts its lifetime, with its expiry timer on `engine`.
    ///
    /// - Parameters:
    ///   - value: The value to keep.
    ///   - lifetime: How long the value lives without a ``touch()``; zero or negative
    ///     expires it at once (on the engine's thread).
    ///   - engine: The engine that runs the expiry timer.
    ///   - onExpiry: Called once with the value when it expires. Not called after
    ///     ``invalidate()``, nor when the container is released first. On an engine that
    ///     was shut down the timer cannot be armed and the value does not expire by itself.
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
    ///     expires it at once (where the backend fires).
    ///   - backend: What runs the expiry timer; the shared engine by default.
    ///   - onExpiry: Called once with the value when it expires. Not called after
    ///     ``invalidate()``, nor when the container is released first. When the backend
    ///     cannot arm the timer (an engine that was shut down) the value does not expire by
    ///     itself.
    public init(
        _ value: Value,
        lifetime: Duration,
        backend: SafeDispatchTimer.Backend = .engine(.shared),
        onExpiry: @escaping @Sendable (Value) -> Void = { _ in }
    ) {
        let lifetimeNanoseconds = max(lifetime, .zero).saturatingNanoseconds
        let now: @Sendable () -> Int64
        switch backend {
        case .custom(let timeline): now = { timeline.now(.monotonic) }
        // No capture: a touch on a real clock calls no context and allocates none.
        case .engine, .dispatch: now = { TimerClock.monotonic.now().nanoseconds }
        }
        let expiry = now().addingSaturating(lifetimeNanoseconds)
        self.expiry = Atomic(expiry)
        self.content = value
        self.lifetimeNanoseconds = lifetimeNanoseconds
        self.now = now
        self.timer = SafeDispatchTimer(queue: nil, backend: backend, clock: .monotonic)
        self.onExpiry = onExpiry
        self.timer.schedule(at: TimerInstant(nanoseconds: expiry), every: self.period) { [weak self] tick in
            self?.fired(at: tick.fired.nanoseconds)
        }
    }

    /// Repeating, so that a firing that finds the value touched can move the same timer (a
    /// one-shot that fired can only be scheduled again, with a new handler). The period is
    /// only a fallback: each firing re-arms for the recorded expiry or ends the value.
    private var period: Duration {
        .nanoseconds(max(self.lifetimeNanoseconds, 1))
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
        let expiry = self.now().addingSaturating(self.lifetimeNanoseconds)
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

    /// Ends the value without calling `onExpiry` and disarms the timer.
    ///
    /// - Returns: The value, or `nil` if it had already expired or was invalidated.
    @discardableResult
    public func invalidate() -> Value? {
        guard self.expiry.exchange(Self.ended, ordering: .relaxed) != Self.ended else { return nil }
        self.timer.cancel()
        return self.content
    }

    /// A firing of the timer; `now` is when it fired, never later than the present, so a
    /// decision to end on it cannot be early.
    private func fired(at now: Int64) {
        var recorded = self.expiry.load(ordering: .relaxed)
        while recorded != Self.ended {
            if now < recorded {
                // Touched since the timer was armed: wait for the rest on the same timer. A
                // touch meanwhile only moves the expiry later, which the next firing sees.
                self.timer.reschedule(at: TimerInstant(nanoseconds: recorded), every: self.period)
                return
            }
            let (exchanged, current) = self.expiry.compareExchange(
                expected: recorded,
                desired: Self.ended,
                ordering: .relaxed
            )
            if exchanged {
                self.timer.cancel()
                self.onExpiry(self.content)
                return
            }
            recorded = current
        }
    }
}
