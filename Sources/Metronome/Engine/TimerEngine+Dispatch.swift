#if !Engine
@preconcurrency import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The engine where it is compiled out (the `Engine` trait off, as where there is no
/// `timerfd`): the same API, with every timer fired by a GCD `DispatchSourceTimer`
/// through ``DispatchBackend``, so that `.engine(.shared)`, the default backend of every
/// type, still works. Handlers with no queue run one at a time on the engine's serial
/// queue, as they would on its firing thread. A configuration is checked as the engine
/// checks it, but only GCD's own coalescing applies, and there is no real-time priority,
/// CPU affinity, spin window or shard: ``threadReport`` refuses what was asked for, and of
/// the counters only ``Counters/armed`` counts.
extension TimerEngine: BackendArmingsFiring {
    /// The engine every timer uses unless told otherwise, created on first use.
    ///
    /// Nothing can shut it down: every library in the process may use it, so `shutdown()`
    /// on it does nothing.
    public static let shared = TimerEngine(checked: sharedConfiguration, isShared: true)

    /// Creates an engine whose timers GCD fires.
    ///
    /// - Parameter configuration: Checked as the engine checks it; otherwise only its
    ///   name is used, as the label of the queue handlers without one run on.
    /// - Throws: ``TimerError`` with `EINVAL` for a configuration that
    ///   ``Configuration/validate()`` refuses.
    public convenience init(configuration: Configuration = Configuration()) throws(TimerError) {
        try configuration.validate()
        self.init(checked: configuration)
    }

    /// Marks the queues of every engine, so that a shutdown from a handler on one of them
    /// does not wait for itself or for another engine's handler.
    private static let firingQueueKey = DispatchSpecificKey<Void>()

    static func makeFiringQueue(_ configuration: Configuration) -> DispatchQueue {
        let queue = DispatchQueue(label: configuration.name ?? "metronome")
        queue.setSpecific(key: Self.firingQueueKey, value: ())
        return queue
    }

    /// Stops the engine: disarms every timer, waits for a running handler on its queue,
    /// releases every handler. A running ``SafeDispatchTimer`` on it is then cancelled; a
    /// suspended one stays suspended, and resuming it returns `false`. Timers scheduled on
    /// it afterwards return `false`. Idempotent. From a handler on the queue of any engine
    /// it returns without waiting. The task is suspended, not its thread blocked, while a
    /// running handler finishes. On ``shared`` it does nothing.
    public func shutdown() async {
        guard !self.isShared else { return }
        for timer in self.armings.stop() { timer.released() }
        guard DispatchQueue.getSpecific(key: Self.firingQueueKey) == nil else { return }
        await withCheckedContinuation { (stopped: CheckedContinuation<Void, Never>) in
            self.firingQueue.async { stopped.resume() }
        }
    }

    /// Stops the engine as `await shutdown()` does, blocking the calling thread while a running
    /// handler finishes.
    @available(*, noasync, message: "Blocks the thread while a handler runs; use `await shutdown()`")
    public func syncShutdown() {
        guard !self.isShared else { return }
        for timer in self.armings.stop() { timer.released() }
        if DispatchQueue.getSpecific(key: Self.firingQueueKey) == nil { self.firingQueue.sync {} }
    }

    /// The blocking form's old name (see the engine's).
    @available(*, unavailable, renamed: "syncShutdown()")
    public func shutdown() {
        self.syncShutdown()
    }

    /// The timers armed now; every other counter is zero, as GCD reports none of them.
    public var counters: Counters {
        Counters(
            wakeups: 0, fired: 0, late: 0, missedPeriods: 0, armed: UInt64(self.armings.armedCount), coalesced: 0,
            clockSteps: 0, batched: 0, memoryBytes: 0)
    }

    /// No real-time priority and no CPU affinity: one that was asked for is refused with
    /// `ENOTSUP`.
    public var threadReport: ThreadReport {
        ThreadReport(
            realtimePriority: nil,
            realtimeRefusal: self.configuration.realtimePriority.map { _ in Self.unsupported("realtimePriority") },
            cpu: nil,
            cpuRefusal: self.configuration.cpu.map { _ in Self.unsupported("cpu") },
            threadName: self.firingQueue.label
        )
    }

    private static func unsupported(_ setting: String) -> TimerError {
        TimerError(
            code: ENOTSUP, operation: "TimerEngine", setting: setting, reason: "needs the engine (the Engine trait)")
    }

    /// Does nothing: GCD re-evaluates wall-clock deadlines itself when the clock is set.
    public func clockChanged(_ clock: TimerClock) {}
}
#endif
