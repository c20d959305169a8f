@preconcurrency import Dispatch

/// A timer with the API Swift developers know from `DispatchSourceTimer`, that cannot crash.
///
/// Every method is safe from any thread, concurrently, in every state. A call that makes no
/// sense in the current state (resuming a running timer, cancelling twice) does nothing
/// and returns `false`; none of libdispatch's "over-resume" or "release of a suspended
/// object" traps can happen. Dropping the last reference cancels the timer, in any state.
///
/// ```swift
/// final class BackgroundPoller: Sendable {
///     private let timer = SafeDispatchTimer()              // on the shared engine
///
///     func start() {
///         self.timer.schedule(interval: 5.0) { [weak self] in
///             self?.fetchData()
///         }
///     }
///     func pause() { self.timer.suspend() }                // no-op unless running
///     func unpause() { self.timer.resume() }               // no-op unless suspended
///     func stop() { self.timer.cancel() }                  // no-op unless running or suspended
///     private func fetchData() {}
/// }
/// ```
///
/// States: `idle` → `running` (schedule) ⇄ `suspended` → `cancelled`; scheduling again
/// from `cancelled` starts it again, and a one-shot that has fired is `idle` again. Once
/// ``cancel()``, ``suspend()`` or a `reschedule` returns, no handler for the old schedule
/// starts; one already running finishes (``cancelAndWait()`` and
/// ``cancelAndAwaitHandlers()`` wait for it). See <doc:StateMachine> for the full
/// transition table.
///
/// The timer holds its handler only while it can run it: a cancel, and a one-shot's
/// firing once the handler returns, release it; a suspended timer keeps it for
/// ``resume()``. A handler that captures the timer's owner strongly therefore keeps the
/// owner alive until the timer is cancelled, not for good.
///
/// An engine's `shutdown()` cancels the running timers it stops, which
/// releases their handlers. A backend that can arm no more (an engine that was shut down)
/// refuses: scheduling returns `false` and does nothing; a reschedule or resume returns
/// `false` and leaves the timer cancelled, since its previous arming is already gone.
public final class SafeDispatchTimer: Sendable {
    /// Where a timer is in its life.
    public enum State: Sendable, Hashable {
        /// Never scheduled, or a one-shot that has fired.
        case idle
        /// Armed: the handler runs at each deadline.
        case running
        /// Scheduled but paused; ``resume()`` continues the schedule.
        case suspended
        /// Stopped; ``schedule(interval:handler:)`` starts it again.
        case cancelled
    }

    /// What fires the timer.
    public enum Backend: Sendable {
        /// Metronome's engine (the default): a timerfd-driven firing thread.
        case engine(TimerEngine)
        /// A GCD `DispatchSourceTimer`, for comparison.
        case dispatch
        /// Any other backend, such as `MetronomeTesting.ManualTimeline` in tests.
        case custom(any TimerBackend)

        /// The engine, when this backend is one; `nil` for GCD and custom backends.
        public var engine: TimerEngine? {
            guard case .engine(let engine) = self else { return nil }
            return engine
        }

        /// The current time on `clock` as this backend measures it: virtual time for a test
        /// double, the real clock otherwise.
        ///
        /// - Parameter clock: The clock to read.
        /// - Returns: The current instant on `clock`.
        public func now(on clock: TimerClock) -> TimerInstant {
            guard case .custom(let backend) = self else { return clock.now() }
            return TimerInstant(nanoseconds: backend.now(clock), clock: clock)
        }
    }

    /// Safe from any thread behind its own lock (see ``TimerCore``).
    nonisolated(unsafe) let core: TimerCore

    /// The clock the timer's deadlines are measured on.
    public var clock: TimerClock {
        self.core.clock
    }

    /// Creates an idle timer.
    ///
    /// - Parameters:
    ///   - queue: Where the handler runs. `nil` runs it on the firing thread itself: the
    ///     lowest latency, for handlers that return quickly (with `.dispatch`, on a private
    ///     serial queue). On any queue, concurrent too, the timer's handlers run one at a
    ///     time, as a dispatch source's do: a firing that comes while one runs waits, merged
    ///     into the latest, whose ``Tick/missed`` counts the ones it stands for.
    ///   - backend: What fires the timer; the shared engine by default.
    ///   - clock: The clock deadlines are measured on.
    public init(queue: DispatchQueue? = nil, backend: Backend = .engine(.shared), clock: TimerClock = .monotonic) {
        self.core = TimerCore.make(delivery: queue.map { .queue($0) }, firing: backend.firing, clock: clock)
    }

    /// Creates an idle timer whose handlers run isolated to `executor`: a NIO event loop's
    /// (`eventLoop.executor`) or any other serial executor.
    ///
    /// The guarantees of a queue hold: one handler at a time, a firing that comes while one
    /// runs merged into the latest, ``cancelAndWait()`` waiting for the one running. Each
    /// delivery is a task on the executor.
    ///
    /// - Parameters:
    ///   - executor: Where the handlers run; the timer keeps it.
    ///   - backend: What fires the timer; the shared engine by default.
    ///   - clock: The clock deadlines are measured on.
    public init(executor: any SerialExecutor, backend: Backend = .engine(.shared), clock: TimerClock = .monotonic) {
        let delivery = HandlerDelivery.executor(ExecutorIsolation(executor: executor))
        self.core = TimerCore.make(delivery: delivery, firing: backend.firing, clock: clock)
    }

    /// Creates an idle timer whose handlers run isolated to `actor`, with the guarantees of
    /// ``init(executor:backend:clock:)``: reach the actor's state with `assumeIsolated`.
    ///
    /// The timer holds the actor weakly, so an actor may own its timer; once the actor is
    /// gone, its handlers run on a global queue, where a weak reference to it is empty.
    ///
    /// ```swift
    /// actor Poller {
    ///     private var polls = 0
    ///     private lazy var timer = SafeDispatchTimer(isolatedTo: self)
    ///
    ///     func start() {
    ///         self.timer.schedule(after: .seconds(1), every: .seconds(1)) { [unowned self] in
    ///             self.assumeIsolated { $0.polls += 1 }
    ///         }
    ///     }
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - actor: Whose executor runs the handlers.
    ///   - backend: What fires the timer; the shared engine by default.
    ///   - clock: The clock deadlines are measured on.
    public init(isolatedTo actor: some Actor, backend: Backend = .engine(.shared), clock: TimerClock = .monotonic) {
        let delivery = HandlerDelivery.executor(ExecutorIsolation(actor: actor))
        self.core = TimerCore.make(delivery: delivery, firing: backend.firing, clock: clock)
    }

    deinit {
        self.core.ownerGone()
    }

    /// Schedules a validated schedule; a backend's refusal is `false`, as documented.
    func arm(_ schedule: TimerSchedule, handler: @escaping @Sendable (Tick) -> Void) -> Bool {
        (try? self.core.schedule(schedule, handler: handler)) ?? false
    }

    /// Cancels the timer for good, before or after it is scheduled: a later `schedule`
    /// returns `false`, so a cancellation from another thread wins a race with an arming.
    func close() {
        self.core.close()
    }

    /// The timer's state now.
    public var state: State {
        self.core.state
    }

    /// What fires the timer.
    public var backend: Backend {
        Backend(firing: self.core.firing)
    }

    /// The current schedule while the timer is running or suspended, otherwise `nil`.
    ///
    /// For a suspended timer, the schedule it follows once resumed.
    public var currentSchedule: TimerSchedule? {
        self.core.schedule
    }

    /// Fires `handler` every `interval` seconds, starting `interval` from now.
    ///
    /// - Returns: `false`, doing nothing, unless the timer is idle or cancelled, or when
    ///   `interval` is not a finite positive number of at least a nanosecond.
    @discardableResult
    public func schedule(interval: Double, handler: @escaping @Sendable () -> Void) -> Bool {
        guard let period = DispatchConversions.interval(seconds: interval) else { return false }
        let start = self.core.now().addingSaturating(period)
        guard let schedule = TimerSchedule(deadlineNanoseconds: start, periodNanoseconds: period) else {
            return false
        }
        return self.arm(schedule) { _ in handler() }
    }

    /// Fires `handler` at `deadline` and then every `repeating`, each firing allowed to be
    /// up to `leeway` late so that wake-ups can be shared.
    ///
    /// Repeating deadlines are `deadline + k · repeating`, so lateness never accumulates;
    /// after a late tick, `missedTicks` says what comes of the deadlines that passed meanwhile
    /// (by default one tick reporting them in ``Tick/missed``, not a burst). A `leeway`
    /// longer than `repeating` is clamped to it.
    ///
    /// - Returns: `false`, doing nothing, unless the timer is idle or cancelled, or for a
    ///   negative interval, a zero period, or a `.never` leeway.
    @discardableResult
    public func schedule(
        deadline: DispatchTime,
        repeating: DispatchTimeInterval = .never,
        leeway: DispatchTimeInterval = .nanoseconds(0),
        missedTicks: MissedTickPolicy = .skip,
        handler: @escaping @Sendable (Tick) -> Void
    ) -> Bool {
        guard
            let schedule = self.core.schedule(
                deadline: deadline, repeating: repeating, leeway: leeway, missedTicks: missedTicks)
        else {
            return false
        }
        return self.arm(schedule, handler: handler)
    }

    /// ``schedule(deadline:repeating:leeway:missedTicks:handler:)`` with a handler that takes no tick,
    /// as a dispatch source's event handler.
    @discardableResult
    public func schedule(
        deadline: DispatchTime,
        repeating: DispatchTimeInterval = .never,
        leeway: DispatchTimeInterval = .nanoseconds(0),
        missedTicks: MissedTickPolicy = .skip,
        handler: @escaping @Sendable () -> Void
    ) -> Bool {
        self.schedule(deadline: deadline, repeating: repeating, leeway: leeway, missedTicks: missedTicks) { _ in
            handler()
        }
    }

    /// Fires `handler` at `deadline` and then every `repeating` seconds, as
    /// `DispatchSourceTimer.schedule(deadline:repeating:leeway:)` with a `Double` interval.
    ///
    /// - Returns: `false`, doing nothing, unless the timer is idle or cancelled, or when
    ///   `repeating` is not a finite positive number of at least a nanosecond.
    @discardableResult
    public func schedule(
        deadline: DispatchTime,
        repeating: Double,
        leeway: DispatchTimeInterval = .nanoseconds(0),
        missedTicks: MissedTickPolicy = .skip,
        handler: @escaping @Sendable (Tick) -> Void
    ) -> Bool {
        guard let period = DispatchConversions.interval(seconds: repeating) else { return false }
        return self.schedule(
            deadline: deadline, repeating: .nanoseconds(Int(period)), leeway: leeway, missedTicks: missedTicks,
            handler: handler)
    }

    /// ``schedule(deadline:repeating:leeway:missedTicks:handler:)-(_,Double,_,_,_)`` with a
    /// handler that takes no tick.
    @discardableResult
    public func schedule(
        deadline: DispatchTime,
        repeating: Double,
        leeway: DispatchTimeInterval = .nanoseconds(0),
        missedTicks: MissedTickPolicy = .skip,
        handler: @escaping @Sendable () -> Void
    ) -> Bool {
        self.schedule(deadline: deadline, repeating: repeating, leeway: leeway, missedTicks: missedTicks) { _ in
            handler()
        }
    }

    /// Moves a running or suspended timer to a new schedule, keeping its handler and leeway.
    ///
    /// A suspended timer stays suspended and follows the new schedule once resumed. On the
    /// engine, moving a running timer's deadline later on the same clock (an idle timeout
    /// pushed on each request) is one O(1) call into the engine.
    ///
    /// - Returns: `false`, doing nothing, for an idle or cancelled timer or invalid values.
    @discardableResult
    public func reschedule(deadline: DispatchTime, repeating: DispatchTimeInterval = .never) -> Bool {
        self.core.reschedule(deadline: deadline, repeating: repeating)
    }

    /// Pauses a running timer.
    ///
    /// - Returns: `false`, doing nothing, unless the timer is running.
    @discardableResult
    public func suspend() -> Bool {
        self.core.suspend()
    }

    /// Continues a suspended timer. A repeating timer keeps its phase: deadlines that passed
    /// while suspended are skipped (not reported as missed); a one-shot whose deadline
    /// passed fires by its deadline plus leeway, at once if that has passed too.
    ///
    /// - Returns: `false`, doing nothing, unless the timer is suspended.
    @discardableResult
    public func resume() -> Bool {
        self.core.resume()
    }

    /// Stops a running or suspended timer. A handler already running is not interrupted.
    ///
    /// - Returns: `false`, doing nothing, unless the timer is running or suspended.
    @discardableResult
    public func cancel() -> Bool {
        self.core.cancel()
    }

    /// Cancels the timer and returns once no handler of it is running, and the timer has
    /// let go of the handler: captures it held the last reference to are gone by then.
    ///
    /// The calling thread blocks while a handler runs. From inside the timer's own handler
    /// it cancels and returns at once, and so it does from any handler that handler led to
    /// on the same stack (virtual time fires handlers on the stack of whatever advances it).
    /// Do not call it while holding a lock that the handler takes. In `async` code use
    /// ``cancelAndAwaitHandlers()``, which suspends instead.
    @available(*, noasync, message: "Use `await cancelAndAwaitHandlers()`: it suspends instead of blocking a thread")
    public func cancelAndWait() {
        self.core.cancelAndWait()
    }

    /// Cancels the timer and suspends the calling task until no handler of it is running.
    ///
    /// The `async` form of ``cancelAndWait()``: no thread is blocked while a handler runs;
    /// the handler that finishes last resumes the task. Once this returns, no handler of
    /// the timer runs until it is scheduled again. Cancelling the calling task does not cut
    /// the wait short: a handler cannot be interrupted, and returning before it finished
    /// would break the guarantee. On an executor it also waits for a delivery still on its
    /// way there, so the executor (an event loop) may be shut down once this returns.
    ///
    /// ```swift
    /// await timer.cancelAndAwaitHandlers()
    /// connection.close()   // no handler of `timer` is using it any more
    /// ```
    public func cancelAndAwaitHandlers() async {
        await self.core.cancelAndAwaitHandlers()
    }
}
