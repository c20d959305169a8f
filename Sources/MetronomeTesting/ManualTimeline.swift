@preconcurrency import Dispatch
import Metronome

/// Virtual time for tests: a ``TimerBackend`` whose clock only moves when told, firing
/// every due timer synchronously, in (deadline, arm order) order.
///
/// Like NIO's `EmbeddedEventLoop`, nothing happens between calls, so tests of code built
/// on ``SafeDispatchTimer`` are deterministic and take microseconds:
///
/// ```swift
/// let timeline = ManualTimeline()
/// let timer = SafeDispatchTimer(backend: .custom(timeline))
/// timer.schedule(interval: 5) { fetches.increment() }
/// timeline.advance(by: .seconds(15))   // three firings, here and now
/// ```
///
/// Or let time move by itself: ``run(_:)`` advances to the next deadline whenever every task
/// of its body waits, so code that sleeps or waits on deadlines needs no choreography:
///
/// ```swift
/// try await timeline.run { try await retrying(clock: timeline.clock) }
/// ```
///
/// Every clock reads the same virtual time, starting at ``init(startingAt:)``. Handlers run
/// on the thread that advances time, whatever queue the timer was given, at their exact
/// deadline (leeway is accepted and ignored), and a ``Tick``'s `fired` is the virtual
/// instant the handler ran. A handler that advances time runs the other timers falling due
/// meanwhile, but makes its own timer late: one timer's handlers never overlap, so the
/// firings it missed come as one when it returns, on the same thread, counted in `missed`.
public final class ManualTimeline: TimerBackend, Sendable {
    private struct Entry {
        var deadline: Int64
        var sequence: UInt64
        let period: Int64?
        let missedTicks: MissedTickPolicy
        let order: UInt64
        let fire: @Sendable (Tick) -> Void
    }

    /// A task waiting in ``waitForArmedTimers(_:)``.
    private struct ArmedWaiter {
        let count: Int
        let continuation: CheckedContinuation<Void, Never>
    }

    private struct Storage {
        var now: Int64
        var entries: [UInt64: Entry] = [:]
        var nextOrder: UInt64 = 0
        var armedWaiters: [ArmedWaiter] = []
        /// Repeating timers whose handler is running: not due again until it returns, so a
        /// handler that moves time on makes its own timer late rather than firing it inside.
        var running: Set<UInt64> = []

        /// Removes and returns the waiters whose count is reached.
        mutating func takeSatisfiedWaiters() -> [CheckedContinuation<Void, Never>] {
            let armed = self.entries.count
            let satisfied = self.armedWaiters.filter { $0.count <= armed }.map(\.continuation)
            self.armedWaiters.removeAll { $0.count <= armed }
            return satisfied
        }

        /// The next entry due at or before `limit`, earliest deadline first, then arm order.
        func nextDue(before limit: Int64) -> (key: UInt64, value: Entry)? {
            self.entries
                .filter { $0.value.deadline <= limit && !self.running.contains($0.key) }
                .min { ($0.value.deadline, $0.value.order) < ($1.value.deadline, $1.value.order) }
        }
    }

    private let storage: LockedBox<Storage>

    /// Runs the tasks of ``run(_:)`` and counts the holds on time.
    let executor = TimelineExecutor()

    /// Creates a timeline whose clocks all read `start`.
    public init(startingAt start: TimerInstant = TimerInstant(nanoseconds: 0)) {
        self.storage = LockedBox(Storage(now: start.nanoseconds))
    }

    /// The virtual time now.
    public var now: TimerInstant {
        TimerInstant(nanoseconds: self.storage.withLockedValue { $0.now })
    }

    /// Timers armed now.
    public var armedCount: Int {
        self.storage.withLockedValue { $0.entries.count }
    }

    public func now(_ clock: TimerClock) -> Int64 {
        self.storage.withLockedValue { $0.now }
    }

    public func arm(
        _ schedule: TimerSchedule,
        clock: TimerClock,
        queue: DispatchQueue?,
        fire: @escaping @Sendable (Tick) -> Void
    ) -> (any ArmedTimer)? {
        let (key, satisfied) = self.storage.withLockedValue { storage in
            let key = storage.nextOrder
            storage.nextOrder += 1
            storage.entries[key] = Entry(
                deadline: schedule.deadlineNanoseconds,
                sequence: 0,
                period: schedule.periodNanoseconds,
                missedTicks: schedule.missedTicks,
                order: key,
                fire: fire
            )
            return (key, storage.takeSatisfiedWaiters())
        }
        satisfied.forEach { $0.resume() }
        return Armed(timeline: self, key: key)
    }

    /// Suspends until at least `count` timers are armed on the timeline.
    ///
    /// Code under test that sleeps or waits in another task arms its timer some time after
    /// the task starts; waiting for the arming, rather than yielding a number of times,
    /// makes the next ``advance(by:)`` certain to reach it.
    ///
    /// ```swift
    /// let sleeper = Task { try await Task.sleep(for: .seconds(5), clock: timeline.clock) }
    /// await timeline.waitForArmedTimers(1)
    /// timeline.advance(by: .seconds(5))
    /// ```
    ///
    /// Cancelling the waiting task does not end the wait. Inside ``run(_:)`` there is no
    /// need for it: the run moves time on only once every task of it waits.
    ///
    /// - Parameter count: The number of armed timers to wait for.
    public func waitForArmedTimers(_ count: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let reached = self.storage.withLockedValue { storage in
                guard storage.entries.count < count else { return true }
                storage.armedWaiters.append(ArmedWaiter(count: count, continuation: continuation))
                return false
            }
            if reached { continuation.resume() }
        }
    }

    /// Moves time forward by `duration`, firing every timer that falls due on the way.
    public func advance(by duration: Duration) {
        self.advance(to: self.now.advanced(by: duration))
    }

    /// Moves time forward to `instant` (never backward), firing every timer that falls due
    /// on the way at its own deadline.
    ///
    /// A handler may move time on itself. Its own timer is then late: the firings it
    /// missed meanwhile come as one, once it returns, with ``Tick/missed`` counting the
    /// periods skipped and ``Tick/fired`` the virtual instant it ran.
    public func advance(to instant: TimerInstant) {
        while self.fireNext(before: instant.nanoseconds) {}
        self.storage.withLockedValue { $0.now = max($0.now, instant.nanoseconds) }
    }

    /// Moves time to the earliest armed deadline and fires what is due there.
    ///
    /// - Returns: `false` if no timer is armed (time does not move).
    func advanceToNextDeadline() -> Bool {
        let next = self.storage.withLockedValue { storage in
            storage.entries.filter { !storage.running.contains($0.key) }.map(\.value.deadline).min()
                .map { max($0, storage.now) }
        }
        guard let next else { return false }
        self.advance(to: TimerInstant(nanoseconds: next))
        return true
    }

    /// Advances to each next deadline until no timer is armed, firing as it goes.
    ///
    /// - Parameter limit: The most firings to run, so a repeating timer cannot loop forever.
    /// - Returns: The number of firings run.
    @discardableResult
    public func runUntilIdle(limit: Int = 10_000) -> Int {
        var fired = 0
        while fired < limit, self.fireNext(before: .max) {
            fired += 1
        }
        return fired
    }

    /// Fires the next timer due at or before `limit` or before now, whichever is later (a
    /// handler that moved time on leaves its own timer due behind now).
    ///
    /// - Returns: `false` if none is due.
    private func fireNext(before limit: Int64) -> Bool {
        guard let (key, tick, fire) = self.popDue(before: limit) else { return false }
        fire(tick)
        self.storage.withLockedValue { _ = $0.running.remove(key) }
        return true
    }

    /// Removes the next due firing, moves the clock to it and schedules a repeating timer's
    /// next deadline, all under the lock; the handler then runs outside it.
    private func popDue(before limit: Int64) -> (UInt64, Tick, @Sendable (Tick) -> Void)? {
        self.storage.withLockedValue { storage in
            guard let (key, entry) = storage.nextDue(before: max(limit, storage.now)) else { return nil }
            storage.now = max(storage.now, entry.deadline)
            // Like the engine, by the timer's missed-tick policy: deadlines already behind
            // `now` are skipped and reported, fired one by one, or the grid moves on.
            let behind =
                entry.period.map { storage.now > entry.deadline ? (storage.now - entry.deadline) / $0 : 0 } ?? 0
            let missed = entry.missedTicks == .skip ? behind : 0
            let scheduled = entry.deadline + missed * (entry.period ?? 0)
            let tick = Tick(
                scheduled: TimerInstant(nanoseconds: scheduled),
                fired: TimerInstant(nanoseconds: storage.now),
                missed: Int(missed),
                sequence: entry.sequence + UInt64(missed)
            )
            if let period = entry.period {
                var next = entry
                let from = entry.missedTicks == .delay && behind > 0 ? storage.now : scheduled
                next.deadline = from.addingReportingOverflow(period).partialValue
                next.sequence = tick.sequence + 1
                storage.entries[key] = next.deadline > from ? next : nil
                storage.running.insert(key)
            } else {
                storage.entries[key] = nil
            }
            return (key, tick, entry.fire)
        }
    }

    private func disarm(_ key: UInt64) {
        self.storage.withLockedValue { _ = $0.entries.removeValue(forKey: key) }
    }

    private struct Armed: ArmedTimer {
        let timeline: ManualTimeline
        let key: UInt64

        func disarm() {
            self.timeline.disarm(self.key)
        }
    }
}
