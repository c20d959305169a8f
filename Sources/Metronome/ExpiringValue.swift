/// A value that expires after a lifetime without use: a time-limited container.
///
/// A ``touch()`` only records the new expiry instant in one atomic word: no lock, no
/// allocation and no call into the engine, so touching on every request costs about a clock
/// read. The container's one timer stays armed for the expiry it last saw; when it fires
/// before the recorded expiry (the value was touched meanwhile), it re-arms itself for the
/// rest of the lifetime. The container is two small objects and its arming, with no lock,
/// no handler closure and no ``SafeDispatchTimer`` of its own.
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
    /// Held by the backend too while armed; this container's release ends it.
    private let timer: ExpiryTimer<Value>

    /// How long the value lives after creation or its last ``touch()``: the lifetime given,
    /// with a negative one counted as zero and one past `Int64` nanoseconds (about 292
    /// years) cut to that.
    public var lifetime: Duration {
        .nanoseconds(self.timer.lifetimeNanoseconds)
    }

    /// What the expiry timer runs on.
    public var backend: SafeDispatchTimer.Backend {
        SafeDispatchTimer.Backend(self.timer.firing)
    }

    /// The engine the expiry timer runs on; `nil` when ``backend`` is not an engine.
    public var engine: TimerEngine? {
        self.timer.firing as? TimerEngine
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
        self.timer = ExpiryTimer(
            value,
            lifetimeNanoseconds: max(lifetime, .zero).saturatingNanoseconds,
            firing: backend.firing,
            onExpiry: onExpiry
        )
    }

    deinit {
        _ = self.timer.end()
    }

    /// The value, or `nil` once it has expired or was invalidated.
    public var value: Value? {
        self.timer.isExpired ? nil : self.timer.content
    }

    /// Whether the value has expired or was invalidated.
    public var isExpired: Bool {
        self.timer.isExpired
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
        self.timer.touch()
    }

    /// Ends the value without calling `onExpiry` and disarms the timer.
    ///
    /// - Returns: The value, or `nil` if it had already expired or was invalidated.
    @discardableResult
    public func invalidate() -> Value? {
        self.timer.end() ? self.timer.content : nil
    }
}
