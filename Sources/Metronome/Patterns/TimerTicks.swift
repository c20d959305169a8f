extension TimerEngine {
    /// Ticks every `interval` on this engine, as an `AsyncSequence`.
    ///
    /// The same as `SafeDispatchTimer.Backend.engine(self).ticks(every:leeway:missedTicks:clock:)`;
    /// see ``SafeDispatchTimer/Backend/ticks(every:leeway:missedTicks:clock:)``.
    ///
    /// ```swift
    /// for await tick in TimerEngine.shared.ticks(every: .milliseconds(1)) {
    ///     if tick.missed > 0 { log("fell behind by \(tick.missed) periods") }
    ///     if done { break }   // disarms the timer
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - interval: The period; a non-positive one produces an empty sequence.
    ///   - leeway: How late each firing may be, to share wake-ups.
    ///   - missedTicks: What the timer does after a late tick.
    ///   - clock: The clock the deadlines are measured on.
    /// - Returns: A sequence of ticks, one iteration per iterator.
    public func ticks(
        every interval: Duration, leeway: Duration = .zero, missedTicks: MissedTickPolicy = .skip,
        clock: TimerClock = .monotonic
    ) -> TimerTicks {
        SafeDispatchTimer.Backend.engine(self).ticks(
            every: interval, leeway: leeway, missedTicks: missedTicks, clock: clock)
    }
}

extension SafeDispatchTimer.Backend {
    /// Ticks every `interval` on this backend, as an `AsyncSequence`.
    ///
    /// Each iterator arms its own repeating timer when it is created; deadlines are
    /// `start + k · interval` with the first one `interval` from then, so lateness never
    /// accumulates. A consumer slower than the timer is not flooded: an undelivered tick is
    /// merged with the next one, whose ``Tick/missed`` then counts every period the consumer
    /// did not see.
    ///
    /// Leaving the loop (`break`, `return`, a thrown error, the iterator's release) or
    /// cancelling the consuming task disarms the timer. On `.custom(timeline)` (a
    /// `MetronomeTesting.ManualTimeline`) the ticks come as the timeline is advanced.
    ///
    /// ```swift
    /// let backend = SafeDispatchTimer.Backend.engine(.shared)
    /// for await tick in backend.ticks(every: .seconds(1)) {
    ///     report(tick)
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - interval: The period; a non-positive one produces an empty sequence.
    ///   - leeway: How late each firing may be, to share wake-ups.
    ///   - missedTicks: What the timer does after a late tick (see ``MissedTickPolicy``): by
    ///     default one tick for the latest deadline, counting the others in ``Tick/missed``.
    ///   - clock: The clock the deadlines are measured on.
    /// - Returns: A sequence of ticks, one iteration per iterator.
    public func ticks(
        every interval: Duration, leeway: Duration = .zero, missedTicks: MissedTickPolicy = .skip,
        clock: TimerClock = .monotonic
    ) -> TimerTicks {
        TimerTicks(backend: self, interval: interval, leeway: leeway, missedTicks: missedTicks, clock: clock)
    }
}

/// The ticks of a repeating timer, with missed periods merged rather than queued.
///
/// Made by ``SafeDispatchTimer/Backend/ticks(every:leeway:missedTicks:clock:)`` or
/// ``TimerEngine/ticks(every:leeway:missedTicks:clock:)``. Every iterator has its own timer,
/// armed when the iterator is made and disarmed when iteration ends. The sequence finishes
/// when its engine shuts down, or was shut down before it started.
///
/// As everywhere, ``Tick/missed`` counts the periods skipped *before* a tick, since the
/// previous tick the consumer received: `tick.sequence == previous.sequence + tick.missed + 1`
/// (the first tick's `missed` is its `sequence`). Periods are skipped when the engine fired
/// late, or when the consumer was slow.
///
/// At most one tick waits for the consumer. When the timer fires again before the consumer
/// took it, the two are merged into one: the newer ``Tick/scheduled``, ``Tick/fired`` and
/// ``Tick/sequence``, with ``Tick/missed`` increased by the older tick's `missed + 1`. A
/// consumer that stalls for ten periods gets one tick with `missed == 9`, not a burst.
///
/// ```swift
/// var ticks = engine.ticks(every: .milliseconds(10)).makeAsyncIterator()
/// let first = await ticks.next()   // about 10 ms from makeAsyncIterator()
/// ```
public struct TimerTicks: AsyncSequence, Sendable {
    /// Each element is one (possibly merged) firing.
    public typealias Element = Tick

    /// The sequence never throws.
    public typealias Failure = Never

    /// What the timers are armed on.
    public let backend: SafeDispatchTimer.Backend

    /// The period.
    public let interval: Duration
    /// How late each firing may be.
    public let leeway: Duration
    /// What the timer does after a late tick.
    public let missedTicks: MissedTickPolicy
    /// The clock the deadlines are measured on.
    public let clock: TimerClock

    /// Arms a new timer, first deadline ``interval`` from now, and returns its iterator.
    public func makeAsyncIterator() -> Iterator {
        let storage = TickStorage(backend: self.backend, clock: self.clock)
        storage.start(interval: self.interval, leeway: self.leeway, missedTicks: self.missedTicks)
        return Iterator(storage: storage)
    }

    /// Iterates one timer's ticks; releasing it disarms the timer.
    public struct Iterator: AsyncIteratorProtocol {
        /// The sequence never throws.
        public typealias Failure = Never

        private let storage: TickStorage

        init(storage: TickStorage) {
            self.storage = storage
        }

        /// The next tick, waiting for it if needed; `nil` once the task is cancelled or the
        /// backend could not arm the timer (an engine that was shut down).
        public mutating func next() async -> Tick? {
            await self.storage.next()
        }

        /// The next tick, waiting for it if needed; `nil` once the task is cancelled or the
        /// backend could not arm the timer (an engine that was shut down).
        public mutating func next(isolation actor: isolated (any Actor)?) async -> Tick? {
            await self.storage.next()
        }
    }
}

/// One iterator's timer and the tick waiting for its consumer.
final class TickStorage: Sendable {
    private struct State {
        /// The undelivered tick, merged with any later firing.
        var pending: Tick?
        /// The consumer waiting in `next()`.
        var waiter: CheckedContinuation<Tick?, Never>?
        var finished = false
        /// The sequence of the last firing received, to restate `missed` per received tick.
        var lastSequence: UInt64?
    }

    private let state = LockedBox(State())
    private let timer: SafeDispatchTimer

    init(backend: SafeDispatchTimer.Backend, clock: TimerClock) {
        self.timer = SafeDispatchTimer(queue: nil, backend: backend, clock: clock)
    }

    deinit {
        self.timer.cancel()
    }

    func start(interval: Duration, leeway: Duration, missedTicks: MissedTickPolicy) {
        // The timer lets go of its handler when it stops: by `finish`, or by its engine's
        // shutdown, which must finish the sequence rather than leave its consumer waiting.
        let stopped = OnRelease { [weak self] in self?.finish() }
        // A non-positive interval is refused here, which finishes the sequence.
        let armed = self.timer.schedule(
            after: interval, every: interval, leeway: max(leeway, .zero), missedTicks: missedTicks
        ) {
            [weak self] tick in
            // Resume after the strong reference is gone, so that a consumer who breaks out
            // at once releases the last reference itself and disarms synchronously.
            if let (waiter, tick) = withExtendedLifetime(stopped, { self?.take(tick) }) {
                waiter.resume(returning: tick)
            }
        }
        if !armed { self.finish() }
    }

    /// Hands `tick` to the waiting consumer (returned, to resume) or merges it into the
    /// pending tick.
    private func take(_ tick: Tick) -> (CheckedContinuation<Tick?, Never>, Tick)? {
        self.state.withLockedValue { state -> (CheckedContinuation<Tick?, Never>, Tick)? in
            guard !state.finished else { return nil }
            // The engine reports on a late tick the deadlines skipped after it; restate them
            // as the periods skipped before it, which is what merging adds up.
            // A backend of the user's may repeat a sequence or go back: that skipped nothing.
            var tick = tick
            let expected = state.lastSequence.map { $0 &+ 1 } ?? 0
            tick.missed = tick.sequence > expected ? Int(clamping: tick.sequence - expected) : 0
            state.lastSequence = tick.sequence
            if let waiter = state.waiter {
                state.waiter = nil
                return (waiter, tick)
            }
            state.pending = state.pending.map { tick.merged(after: $0) } ?? tick
            return nil
        }
    }

    func next() async -> Tick? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Tick?, Never>) in
                let ready = self.state.withLockedValue { state -> Tick?? in
                    if let pending = state.pending {
                        state.pending = nil
                        return .some(pending)
                    }
                    if state.finished { return .some(nil) }
                    state.waiter = continuation
                    return .none
                }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            self.finish()
        }
    }

    /// Ends the sequence: disarms the timer and releases a waiting consumer with `nil`.
    func finish() {
        let waiter = self.state.withLockedValue { state -> CheckedContinuation<Tick?, Never>? in
            state.finished = true
            state.pending = nil
            defer { state.waiter = nil }
            return state.waiter
        }
        self.timer.cancel()
        waiter?.resume(returning: nil)
    }
}
