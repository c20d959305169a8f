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
/// CPU affinity, spin window or shard.
extension TimerEngine: BackendArmingsFiring {
    static let sharedEngine = TimerEngine(sharing: sharedConfiguration)

    /// Marks the queues of every engine, so that a shutdown from a handler on one of them
    /// does not wait for itself or for another engine's handler.
    private static let firingQueueKey = DispatchSpecificKey<Void>()

    static func dispatchFiring(_ configuration: Configuration) -> (DispatchQueue, BackendArmings) {
        let queue = DispatchQueue(label: configuration.name ?? "metronome")
        queue.setSpecific(key: Self.firingQueueKey, value: ())
        return (queue, BackendArmings(DispatchBackend(fallbackQueue: queue)))
    }

    /// Disarms and releases every timer, then waits for a running handler on the engine's
    /// queue, unless called from a handler on the queue of any engine. A stop racing
    /// another returns once the other's teardown is over, as the engine's does.
    func stop() {
        let fromAHandler = DispatchQueue.getSpecific(key: Self.firingQueueKey) != nil
        self.armings.stop(waitingForAnother: !fromAHandler)
        if !fromAHandler { self.firingQueue.sync {} }
    }

    /// The timers armed now; every other counter is zero, as GCD reports none of them.
    func readCounters() -> Counters {
        Counters(
            wakeups: 0, fired: 0, late: 0, missedPeriods: 0, armed: UInt64(self.armings.armedCount), coalesced: 0,
            clockSteps: 0, batched: 0, memoryBytes: 0)
    }

    func readThreadReport() -> ThreadReport {
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

    /// GCD re-evaluates wall-clock deadlines itself when the clock is set.
    func reevaluate(_ clock: TimerClock) {}
}
#endif
