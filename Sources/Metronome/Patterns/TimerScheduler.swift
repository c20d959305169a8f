@preconcurrency import Dispatch

/// Receives a ``TimerScheduler``'s events; held weakly.
///
/// Calls arrive on the scheduler's delivery queue, one at a time, in the order the events
/// happened. Events for one timer are never reordered.
public protocol TimerSchedulerDelegate: AnyObject, Sendable {
    /// A timer fired.
    ///
    /// - Parameters:
    ///   - id: The timer.
    ///   - willRepeat: `true` for a repeating timer, which stays scheduled; `false` for a
    ///     one-shot, which is then finished.
    func executed(_ id: TimerScheduler.TimerID, willRepeat: Bool)

    /// A timer was cancelled before it finished; it will not fire again.
    func cancelled(_ id: TimerScheduler.TimerID)
}

/// Many timers by id, cancellable from any thread, reporting each firing and cancellation.
///
/// A thread-safe take on the "background timer": ``schedule(after:every:leeway:)`` returns a
/// ``TimerID``; ``cancel(_:)-(TimerID)`` stops it from any thread. Each firing produces an
/// ``Event/executed(_:willRepeat:)`` and each effective cancellation an
/// ``Event/cancelled(_:)``, on the delegate and, once read, on ``events``. Whether a one-shot timer
/// fires or is cancelled is decided under one lock, so it produces exactly one of the two,
/// never both; cancelling a timer that already finished, or cancelling twice, does nothing.
///
/// Events are delivered on a serial queue in the order they were decided, so the events of
/// one id always arrive in order. The timers fire where the backend fires (for an engine,
/// its thread); only the delivery goes through the queue.
///
/// ```swift
/// let scheduler = TimerScheduler()
/// let ping = scheduler.schedule(after: .seconds(1), every: .seconds(1))
/// let timeout = scheduler.schedule(after: .seconds(30))
/// Task {
///     for await event in scheduler.events {
///         switch event {
///         case .executed(ping, _): sendPing()
///         case .executed(timeout, _): giveUp()
///         default: break
///         }
///     }
/// }
/// scheduler.cancel(timeout)   // from any thread; exactly one of executed or cancelled
/// ```
public final class TimerScheduler: Sendable {
    /// Identifies one scheduled timer; unique within its scheduler.
    public struct TimerID: Hashable, Sendable, Comparable, CustomStringConvertible {
        /// The number of the timer, counting from 1 in scheduling order.
        public let rawValue: UInt64

        /// Creates an id from its number.
        public init(rawValue: UInt64) {
            self.rawValue = rawValue
        }

        public static func < (lhs: TimerID, rhs: TimerID) -> Bool {
            lhs.rawValue < rhs.rawValue
        }

        public var description: String { "timer #\(self.rawValue)" }
    }

    /// What happened to a timer.
    public enum Event: Sendable, Hashable {
        /// The timer fired; `willRepeat` is `false` for a one-shot, which is then finished.
        case executed(TimerID, willRepeat: Bool)
        /// The timer was cancelled (or could not be armed) and will not fire again.
        case cancelled(TimerID)

        /// The timer the event is about.
        public var id: TimerID {
            switch self {
            case .executed(let id, _), .cancelled(let id): id
            }
        }
    }

    private struct Entry {
        let timer: SafeDispatchTimer
        let repeating: Bool
    }

    private struct WeakDelegate {
        weak var value: (any TimerSchedulerDelegate)?
    }

    private struct State {
        var nextID: UInt64 = 1
        var timers: [TimerID: Entry] = [:]
        var delegate = WeakDelegate()
        /// The event stream, made when ``events`` is first read.
        var events: AsyncStream<Event>.Continuation?
        var stream: AsyncStream<Event>?
    }

    private let state = LockedBox(State())
    private let delivery: DispatchQueue

    /// What the timers run on.
    public let backend: SafeDispatchTimer.Backend

    /// Every event from the first read of this property on, in the order decided.
    ///
    /// Opt-in: the stream is made when first read, and events decided before that are not
    /// in it, so a client that only sets a delegate buffers nothing. Once made it buffers
    /// without limit until consumed; iterate it once (an `AsyncStream` has one consumer),
    /// and every read returns the same stream. It finishes when the scheduler is released.
    public var events: AsyncStream<Event> {
        self.state.withLockedValue { state in
            if let stream = state.stream { return stream }
            let (stream, continuation) = AsyncStream.makeStream(of: Event.self)
            (state.stream, state.events) = (stream, continuation)
            return stream
        }
    }

    /// Creates a scheduler with no timers, on `engine`.
    ///
    /// - Parameters:
    ///   - engine: The engine the timers run on.
    ///   - queue: Where the delegate is called and events are yielded, through a private
    ///     serial queue targeting it; `nil` uses a private serial queue only.
    @available(*, deprecated, message: "Use `init(backend: .engine(engine), queue:)`")
    public convenience init(engine: TimerEngine, queue: DispatchQueue? = nil) {
        self.init(backend: .engine(engine), queue: queue)
    }

    /// Creates a scheduler with no timers, on `backend`.
    ///
    /// On `.custom(timeline)` (a `MetronomeTesting.ManualTimeline`) the timers fire as the
    /// timeline is advanced; their events are still delivered through the queue.
    ///
    /// - Parameters:
    ///   - backend: What the timers run on; the shared engine by default.
    ///   - queue: Where the delegate is called and events are yielded, through a private
    ///     serial queue targeting it; `nil` uses a private serial queue only.
    public init(backend: SafeDispatchTimer.Backend = .engine(.shared), queue: DispatchQueue? = nil) {
        self.backend = backend
        self.delivery = DispatchQueue(label: "Metronome.TimerScheduler", target: queue)
    }

    deinit {
        // Releasing the entries cancels their timers; no events are sent for them.
        guard let continuation = self.state.withLockedValue({ $0.events }) else { return }
        self.delivery.async { continuation.finish() }
    }

    /// Sets the delegate, held weakly; `nil` removes it.
    ///
    /// Events already queued for delivery go to the delegate set when they are delivered.
    public func setDelegate(_ delegate: (any TimerSchedulerDelegate)?) {
        self.state.withLockedValue { $0.delegate.value = delegate }
    }

    /// The timers scheduled and not yet finished or cancelled.
    public var activeTimers: Set<TimerID> {
        self.state.withLockedValue { Set($0.timers.keys) }
    }

    /// Schedules a timer `delay` from now, repeating every `period` if given.
    ///
    /// Repeating deadlines are `start + k · period`; a late firing that skipped periods
    /// still produces a single ``Event/executed(_:willRepeat:)``. The values follow the
    /// rules every timer follows (see <doc:ChoosingAnAPI>).
    ///
    /// - Parameters:
    ///   - delay: How long from now the first firing is; zero or negative fires at once.
    ///   - period: The period of a repeating timer, or `nil` for a one-shot.
    ///   - leeway: How late each firing may be, to share wake-ups.
    /// - Returns: The timer's id. When the timer cannot be armed (a period that is not
    ///   positive, an engine that was shut down) a ``Event/cancelled(_:)`` for it follows at
    ///   once; one also follows when its engine shuts down before it finishes.
    @discardableResult
    public func schedule(after delay: Duration, every period: Duration? = nil, leeway: Duration = .zero) -> TimerID {
        let timer = SafeDispatchTimer(queue: nil, backend: self.backend, clock: .monotonic)
        // Registered before arming, so a firing can never miss its entry.
        let id = self.state.withLockedValue { state -> TimerID in
            let id = TimerID(rawValue: state.nextID)
            state.nextID += 1
            state.timers[id] = Entry(timer: timer, repeating: period != nil)
            return id
        }
        // The timer lets go of its handler when it stops: by a firing or cancel that
        // already settled the entry, or by its engine's shutdown, which cancels it here.
        let stopped = OnRelease { [weak self] in self?.cancel(id) }
        let armed = timer.schedule(after: delay, every: period, leeway: leeway) { [weak self] _ in
            withExtendedLifetime(stopped) { self?.fired(id) }
        }
        // Refused by the backend, or closed by a cancel that came first and already
        // reported it (the entry is then gone, and this does nothing).
        if !armed { self.cancel(id) }
        return id
    }

    /// Schedules a timer `delay` from now, repeating every `repeating`.
    @available(*, deprecated, renamed: "schedule(after:every:leeway:)")
    @discardableResult
    public func schedule(after delay: Duration, repeating: Duration?) -> TimerID {
        self.schedule(after: delay, every: repeating)
    }

    /// Cancels a timer, from any thread.
    ///
    /// - Returns: `true` if the timer was active and a ``Event/cancelled(_:)`` follows;
    ///   `false`, doing nothing, for a one-shot that already fired or a timer already
    ///   cancelled.
    @discardableResult
    public func cancel(_ id: TimerID) -> Bool {
        self.cancelLocked(CollectionOfOne(id)) == 1
    }

    /// Cancels timers, from any thread; ids that are no longer active are skipped.
    ///
    /// - Returns: How many timers were cancelled, each with one ``Event/cancelled(_:)``.
    @discardableResult
    public func cancel(_ ids: some Sequence<TimerID>) -> Int {
        // Read before locking: a lazy sequence may run code that asks this scheduler.
        self.cancelLocked(Array(ids))
    }

    /// Cancels `ids`, read under the lock: only collections that run no caller code.
    private func cancelLocked(_ ids: some Collection<TimerID>) -> Int {
        let removed = self.state.withLockedValue { state -> [SafeDispatchTimer] in
            var removed: [SafeDispatchTimer] = []
            for id in ids {
                guard let entry = state.timers.removeValue(forKey: id) else { continue }
                removed.append(entry.timer)
                self.enqueue(.cancelled(id), to: state.events)
            }
            return removed
        }
        // Closed, not cancelled: a timer still being armed on another thread stays unarmed.
        for timer in removed { timer.close() }
        return removed.count
    }

    /// Cancels every active timer.
    ///
    /// - Returns: How many timers were cancelled.
    @discardableResult
    public func cancelAll() -> Int {
        self.cancel(self.activeTimers.sorted())
    }

    private func fired(_ id: TimerID) {
        // The entry of a finished one-shot is released outside the lock: its deinit calls
        // into the engine.
        let finished = self.state.withLockedValue { state -> Entry? in
            guard let entry = state.timers[id] else { return nil }
            if entry.repeating {
                self.enqueue(.executed(id, willRepeat: true), to: state.events)
                return nil
            }
            state.timers[id] = nil
            self.enqueue(.executed(id, willRepeat: false), to: state.events)
            return entry
        }
        withExtendedLifetime(finished) {}
    }

    /// Queues an event for delivery. Called under the lock so the delivery order is the
    /// decision order; `async` only enqueues and runs no user code here.
    private func enqueue(_ event: Event, to events: AsyncStream<Event>.Continuation?) {
        let delivered = self.deliveryHold()
        self.delivery.async { [weak self] in
            defer { delivered?() }
            events?.yield(event)
            guard let delegate = self?.state.withLockedValue({ $0.delegate.value }) else { return }
            switch event {
            case .executed(let id, let willRepeat): delegate.executed(id, willRepeat: willRepeat)
            case .cancelled(let id): delegate.cancelled(id)
            }
        }
    }

    /// A virtual timeline's hold on its time until one delivery has run: it cannot see the
    /// queue, and would move on before the consumer of the event had it.
    private func deliveryHold() -> (@Sendable () -> Void)? {
        guard case .custom(let backend) = self.backend else { return nil }
        return (backend as? any DeliveryHoldingBackend)?.holdForDelivery()
    }
}
