@preconcurrency import Dispatch

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
#if Engine
internal import CMetronome
#endif

/// One firing thread and its timers: Metronome's timer engine.
///
/// Most programs use ``shared``. Create an engine of your own for a different
/// ``Configuration``, such as a real-time priority or a spin window for the lowest jitter.
///
/// ```swift
/// let engine = try TimerEngine(configuration: .init(realtimePriority: 10))
/// let timer = SafeDispatchTimer(backend: .engine(engine))
/// timer.schedule(interval: 0.001) { sendNextPacket() }
/// print(engine.counters.fired)
/// ```
///
/// An engine stops when it is shut down or released. Every timer on it is then disarmed
/// and its handler released; a timer scheduled later on it returns `false`. Shutting down
/// may race any call on any thread and may happen inside a handler.
///
/// In a process forked from the one that created it, an engine is dead: its timers do not
/// fire and scheduling on it returns `false`, and nothing touches the descriptors it shares
/// with the parent. ``shared`` is a new engine in the child.
public final class TimerEngine: Sendable {
    /// How an engine's firing thread runs.
    public struct Configuration: Sendable, Hashable {
        /// `SCHED_FIFO` priority 1...99 for the firing thread, or `nil` for normal
        /// scheduling. A refusal (no `CAP_SYS_NICE`) is reported in ``threadReport``.
        public var realtimePriority: Int?
        /// A CPU to pin the firing thread to, or `nil`.
        public var cpu: Int?
        /// Wake up this much before each deadline and spin to it: lower jitter, paid in CPU.
        /// At most ``maximumSpinWindow``; a cancel, an earlier timer or a shutdown ends a spin
        /// at once.
        public var spinWindow: Duration
        /// A firing later than its leeway window by more than this counts in
        /// ``Counters/late``.
        public var lateThreshold: Duration
        /// The firing thread's name, as `top -H` and debuggers show it (cut to 15 bytes);
        /// `nil` names it `metronome-N`.
        public var name: String?
        /// How many shards the engine splits its timers into, 1...``maximumShards``. With
        /// one, every timer shares one lock and one heap per clock. With more, each shard
        /// has its own, and a timer lives in the shard of the thread that scheduled it from
        /// idle (threads take shards in turn), so threads that schedule their own timers
        /// do not contend; any thread may still operate on any timer. All shards fire on
        /// the one firing thread, and a wake-up serves them all, so leeway coalesces across
        /// shards. The price: equal deadlines fire in the order they were scheduled within
        /// a shard, and timers of several shards due at one wake-up fire shard by shard.
        /// Three more descriptors per shard.
        public var shards: Int

        /// The longest ``spinWindow``: past a wake-up's worst latency a spin buys no
        /// precision, only CPU.
        public static let maximumSpinWindow = Duration.nanoseconds(EngineLimits.spinWindowNanoseconds)

        /// The most ``shards`` an engine takes.
        public static let maximumShards = EngineLimits.shards

        /// Creates a configuration; the defaults are normal scheduling, no affinity, no spin
        /// window, a 1 ms late threshold, a numbered thread name and one shard.
        public init(
            realtimePriority: Int? = nil,
            cpu: Int? = nil,
            spinWindow: Duration = .zero,
            lateThreshold: Duration = .milliseconds(1),
            name: String? = nil,
            shards: Int = 1
        ) {
            self.realtimePriority = realtimePriority
            self.cpu = cpu
            self.spinWindow = spinWindow
            self.lateThreshold = lateThreshold
            self.name = name
            self.shards = shards
        }
    }

    /// What the engine has done; each read is a consistent snapshot.
    public struct Counters: Sendable, Hashable {
        /// Times the firing thread woke on a timerfd.
        public var wakeups: UInt64
        /// Timers fired. A firing that comes while its timer's handler still runs is merged
        /// into the next, so handlers may run fewer times.
        public var fired: UInt64
        /// Firings later than their window by more than the late threshold.
        public var late: UInt64
        /// Periods skipped by late repeating timers, as the firing thread saw them. A tick's
        /// `missed` also counts the firings merged into it, so handlers see at most
        /// `fired + missedPeriods` periods.
        public var missedPeriods: UInt64
        /// Timers armed now.
        public var armed: UInt64
        /// Firings that shared a wake-up with an earlier one.
        public var coalesced: UInt64
        /// Wall-clock steps noticed; on an engine of several shards, once by each shard
        /// with wall-clock timers armed.
        public var clockSteps: UInt64
        /// Firings of a burst taken in one sorted pass: a large share of the armed timers
        /// due at once.
        public var batched: UInt64
        /// Bytes the engine holds for its timers; given back as they are destroyed.
        public var memoryBytes: UInt64
        /// Times a handler on the firing thread blocked for more than 2 ms and the engine's
        /// standby thread fired its other timers meanwhile.
        public var takeovers: UInt64 = 0
    }

    /// How the requested thread settings turned out.
    public struct ThreadReport: Sendable, Hashable {
        /// The granted `SCHED_FIFO` priority, or `nil`.
        public var realtimePriority: Int?
        /// Why a requested real-time priority was refused, or `nil`.
        public var realtimeRefusal: TimerError?
        /// The CPU the firing thread is pinned to, or `nil`.
        public var cpu: Int?
        /// Why a requested CPU affinity was refused, or `nil`.
        public var cpuRefusal: TimerError?
        /// The firing thread's name.
        public var threadName: String
    }

    /// The engine every timer uses unless told otherwise, created on first use.
    ///
    /// It is made for a server: ``sharedConfiguration``, one shard per CPU, so threads that
    /// arm and cancel timers at once take different locks and heaps. What that gives up:
    /// equal deadlines fire in the order they were scheduled only among timers scheduled from
    /// the same shard's threads, and timers of several shards due at one wake-up fire shard by
    /// shard rather than in deadline order across shards (each still fires within its own
    /// leeway window, never early). A program that needs one global order for equal deadlines
    /// makes an engine with `shards: 1`.
    ///
    /// Nothing can shut it down: every library in the process may use it, so
    /// `shutdown()` on it does nothing.
    ///
    /// Should it fail to start (no descriptors left), timers on it refuse to schedule. In a
    /// forked child it is a new engine, created on first use there, also in a child forked
    /// while another thread was creating the parent's.
    public static var shared: TimerEngine {
        Self.sharedEngine
    }

    /// The configuration the engine was created with.
    public let configuration: Configuration

    /// Whether this is ``shared``, which `shutdown()` leaves running.
    let isShared: Bool

    #if Engine
    // Freed only in deinit: every armed timer holds the engine, so nothing can race it.
    nonisolated(unsafe) let raw: OpaquePointer?

    /// What the layers above keep per shard, such as the sets of ``ExpiringValue``s.
    let shardObjects: ShardObjects
    #else
    /// What GCD fires for this engine (see TimerEngine+Dispatch.swift).
    let armings: BackendArmings

    /// Where handlers with no queue of their own run, one at a time, as on an engine's
    /// firing thread.
    let firingQueue: DispatchQueue
    #endif

    /// Starts an engine and its firing thread.
    ///
    /// - Parameter configuration: How the firing thread runs.
    /// - Throws: ``TimerError`` with `EINVAL` for a configuration that
    ///   ``Configuration/validate()`` refuses, naming the setting and its range;
    ///   `EMFILE`/`ENFILE` when descriptors run out (an engine needs six, and three more
    ///   per shard after the first).
    ///   The corresponding C function is `mtr_engine_create`.
    public init(configuration: Configuration = Configuration()) throws(TimerError) {
        try configuration.validate()
        self.configuration = configuration
        self.isShared = false
        #if Engine
        self.raw = try Self.start(configuration)
        self.shardObjects = ShardObjects(shards: configuration.shards)
        #else
        (self.firingQueue, self.armings) = Self.dispatchFiring(configuration)
        #endif
    }

    /// ``shared``: an engine that may fail to start (its timers then refuse to arm), and
    /// that no one stops.
    init(sharing configuration: Configuration) {
        self.configuration = configuration
        self.isShared = true
        #if Engine
        self.raw = try? Self.start(configuration)
        self.shardObjects = ShardObjects(shards: configuration.shards)
        #else
        (self.firingQueue, self.armings) = Self.dispatchFiring(configuration)
        #endif
    }

    #if Engine
    deinit {
        mtr_engine_destroy(self.raw)
    }
    #endif

    /// Stops the engine: disarms every timer, waits for a running handler, releases every
    /// handler. A running ``SafeDispatchTimer`` on it is then cancelled; a suspended one
    /// stays suspended, and resuming it returns `false`. Timers scheduled on it afterwards
    /// return `false`; a sleep or a call that needs it throws ``TimerError/engineShutDown``.
    /// Idempotent. From a handler of any engine it returns at once, and this engine's firing
    /// thread finishes the teardown (after its own running handler, if it is this engine's):
    /// a firing thread never waits for another, so engines whose handlers shut each other
    /// down cannot deadlock.
    ///
    /// The task is suspended, not its thread blocked, while a running handler finishes.
    /// Synchronous code calls ``syncShutdown()``.
    ///
    /// On ``shared`` it does nothing: every library in the process may use that engine, so
    /// none of them may stop it under the others.
    ///
    /// The corresponding C function is `mtr_engine_stop`.
    public func shutdown() async {
        guard !self.isShared else { return }
        // The stop waits for a running handler: on a thread of its own, never the pool's.
        await withCheckedContinuation { (stopped: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                self.stop()
                stopped.resume()
            }
        }
    }

    /// Stops the engine as `await shutdown()` does, blocking the calling thread while a running
    /// handler finishes: for synchronous code, as swift-nio's `syncShutdownGracefully()`.
    ///
    /// The corresponding C function is `mtr_engine_stop`.
    @available(*, noasync, message: "Blocks the thread while a handler runs; use `await shutdown()`")
    public func syncShutdown() {
        guard !self.isShared else { return }
        self.stop()
    }

    /// The blocking form's old name. Unavailable rather than deprecated: while a
    /// synchronous `shutdown()` exists, top-level code (`main.swift`) resolves
    /// `await engine.shutdown()` to it.
    @available(*, unavailable, renamed: "syncShutdown()")
    public func shutdown() {
        self.syncShutdown()
    }

    /// The engine's counters now. Without the engine (the `Engine` trait off) only
    /// ``Counters/armed`` counts: GCD reports none of the others.
    public var counters: Counters {
        self.readCounters()
    }

    /// How the requested real-time priority and CPU affinity turned out. Without the engine
    /// (the `Engine` trait off) one that was asked for is refused with `ENOTSUP`.
    public var threadReport: ThreadReport {
        self.readThreadReport()
    }

    /// Makes the engine re-evaluate every timer on `clock`, as it does by itself after a
    /// wall-clock step. Due timers fire; the rest stay armed. Without the engine it does
    /// nothing: GCD re-evaluates wall-clock deadlines itself.
    ///
    /// The corresponding C function is `mtr_engine_clock_changed`.
    public func clockChanged(_ clock: TimerClock) {
        self.reevaluate(clock)
    }

    /// How ``shared`` runs: one shard per CPU online (at most ``Configuration/maximumShards``),
    /// normal scheduling, no affinity, no spin window.
    public static var sharedConfiguration: Configuration {
        let online = Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))
        return Configuration(shards: min(max(online, 1), Configuration.maximumShards))
    }
}
