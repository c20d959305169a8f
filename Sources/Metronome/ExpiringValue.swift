/// A value that expires after a lifetime without use: a time-limited container.
///
/// The value and the timer that ends it are one thing: the value, the timer's generation
/// and the decision to expire live under one lock, so a ``touch()`` racing the expiry
/// resolves one way only. Either the touch wins (it returns `true`, the value stays and a
/// new lifetime starts) or the expiry wins (the touch returns `false` and `onExpiry` runs
/// exactly once). Each touch arms a fresh timer of a new generation; a firing of an older
/// generation finds the generation moved on and does nothing, so a stale timer can never
/// expire a value that was touched after it was armed.
///
/// `onExpiry` runs outside the lock, where the backend fires (for an engine, its firing
/// thread): keep it short, or hand the work to a queue. It may touch or read this container (which will have expired).
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
    private struct State {
        /// The value, or `nil` once it expired or was invalidated.
        var value: Value?
        /// Bumped by every touch and by invalidation; a firing must match it to expire.
        var generation: UInt64 = 0
        /// The timer of the current generation.
        var timer: SafeDispatchTimer?
    }

    private let state: LockedBox<State>

    /// How long the value lives after creation or its last ``touch()``.
    public let lifetime: Duration

    /// What the expiry timers run on.
    public let backend: SafeDispatchTimer.Backend

    /// The engine the expiry timers run on; `nil` when ``backend`` is not an engine.
    public var engine: TimerEngine? {
        self.backend.engine
    }

    private let onExpiry: @Sendable (Value) -> Void

    /// Stores `value` and starts its lifetime, with its expiry timer on `engine`.
    ///
    /// - Parameters:
    ///   - value: The value to keep.
    ///   - lifetime: How long the value lives without a ``touch()``; zero or negative
    ///     expires it at once (on the engine's thread).
    ///   - engine: The engine that runs the expiry timer.
    ///   - onExpiry: Called once with the value when it expires, outside the lock. Not
    ///     called after ``invalidate()``, nor when the container is released first.
    ///     On an engine that was shut down the timer cannot be armed and the value does
    ///     not expire by itself.
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
    ///   - onExpiry: Called once with the value when it expires, outside the lock. Not
    ///     called after ``invalidate()``, nor when the container is released first.
    ///     When the backend cannot arm the timer (an engine that was shut down, a lifetime
    ///     too long for `Int64` nanoseconds) the value does not expire by itself.
    public init(
        _ value: Value,
        lifetime: Duration,
        backend: SafeDispatchTimer.Backend = .engine(.shared),
        onExpiry: @escaping @Sendable (Value) -> Void = { _ in }
    ) {
        self.state = LockedBox(State(value: value))
        self.lifetime = lifetime
        self.backend = backend
        self.onExpiry = onExpiry
        _ = self.rearm()
    }

    /// The value, or `nil` once it has expired or was invalidated.
    public var value: Value? {
        self.state.withLockedValue { $0.value }
    }

    /// Whether the value has expired or was invalidated.
    public var isExpired: Bool {
        self.state.withLockedValue { $0.value == nil }
    }

    /// Starts a new lifetime from now.
    ///
    /// - Returns: `true` if the value was still there (it now lives ``lifetime`` from now);
    ///   `false` if it had already expired or was invalidated, in which case nothing changes.
    @discardableResult
    public func touch() -> Bool {
        self.rearm()
    }

    /// Drops the value without calling `onExpiry` and disarms the timer.
    ///
    /// - Returns: The value, or `nil` if it had already expired or was invalidated.
    @discardableResult
    public func invalidate() -> Value? {
        let (value, timer) = self.state.withLockedValue { state -> (Value?, SafeDispatchTimer?) in
            let value = state.value
            state.value = nil
            state.generation &+= 1
            defer { state.timer = nil }
            return (value, state.timer)
        }
        timer?.cancel()
        return value
    }

    /// Opens a new generation with its own timer, if the value is still there.
    private func rearm() -> Bool {
        let timer = SafeDispatchTimer(queue: nil, backend: self.backend, clock: .monotonic)
        let (generation, previous) = self.state.withLockedValue { state -> (UInt64?, SafeDispatchTimer?) in
            guard state.value != nil else { return (nil, nil) }
            state.generation &+= 1
            defer { state.timer = timer }
            return (state.generation, state.timer)
        }
        guard let generation else { return false }
        previous?.cancel()
        timer.schedule(after: max(self.lifetime, .zero)) { [weak self] _ in
            self?.expire(generation: generation)
        }
        // A newer touch may have taken over before this timer was armed; it then could not
        // disarm it, so do it here rather than leave a stale timer armed.
        let stale = self.state.withLockedValue { $0.generation != generation }
        if stale { timer.cancel() }
        return true
    }

    private func expire(generation: UInt64) {
        // The timer is released outside the lock: its deinit calls into the engine.
        let (value, timer) = self.state.withLockedValue { state -> (Value?, SafeDispatchTimer?) in
            guard state.generation == generation, let value = state.value else { return (nil, nil) }
            state.value = nil
            defer { state.timer = nil }
            return (value, state.timer)
        }
        withExtendedLifetime(timer) {}
        if let value { self.onExpiry(value) }
    }
}
