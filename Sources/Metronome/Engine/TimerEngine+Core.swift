#if Engine
internal import CMetronome

/// The engine's calls into the C core: what ``TimerEngine``'s API does where the `Engine`
/// trait is on (TimerEngine+Dispatch.swift does it on GCD where it is off).
extension TimerEngine {
    static var sharedEngine: TimerEngine {
        // The slot and its lock are the C core's: a fork waits while the engine is made,
        // where a lock of ours, held across a fork, would stay held in the child for good.
        // No generic call here: unoptimized, a generic's first call in a process fills the
        // Swift runtime's type cache under a lock, which a fork may leave held in the child.
        var stored: TimerEngine?
        if let slot = mtr_shared_lock() { stored = Unmanaged<TimerEngine>.fromOpaque(slot).takeUnretainedValue() }
        if let stored, !stored.isInherited {
            mtr_shared_unlock(Unmanaged.passUnretained(stored).toOpaque())
            return stored
        }
        let fresh = TimerEngine(sharing: Self.sharedConfiguration)
        mtr_shared_unlock(Unmanaged.passRetained(fresh).toOpaque())
        // The slot's hold on the inherited engine, let go of unlocked: its end releases
        // handlers, which may use the shared engine.
        if let stored { Unmanaged.passUnretained(stored).release() }
        return fresh
    }

    static func start(_ configuration: Configuration) throws(TimerError) -> OpaquePointer? {
        var engine: OpaquePointer?
        let code = configuration.withCoreConfig { (config: inout mtr_engine_config) in
            config.on_fire = deliverFiring
            config.on_release = releaseReceiver
            return mtr_engine_create(&config, &engine)
        }
        try coreCall("mtr_engine_create") { code }
        return engine
    }

    /// Created before a fork, seen from the child: dead here. No generic call, as in
    /// ``shared``, which asks it in a child.
    var isInherited: Bool {
        guard let raw = self.raw else { return false }
        return mtr_engine_is_inherited(raw) != 0
    }

    /// Whether the engine was shut down, so a timer whose arming the stop drops can tell it
    /// from a cancel of its own. The flag is the core's, not an `Atomic` of ours: an
    /// unoptimized deinit asks the Swift runtime for a generic stored property's type, under
    /// locks a forked child may find held for good.
    var hasStopped: Bool {
        guard let raw = self.raw else { return false }
        return mtr_engine_was_stopped(raw) != 0
    }

    /// Stops the core, waiting for a running callback unless called from a firing thread.
    func stop() {
        if let raw = self.raw { mtr_engine_stop(raw) }
    }

    func readCounters() -> Counters {
        var raw = mtr_counters()
        if let engine = self.raw { _ = mtr_engine_get_counters(engine, &raw) }
        return Counters(
            wakeups: raw.wakeups,
            fired: raw.fired,
            late: raw.late,
            missedPeriods: raw.missed_periods,
            armed: raw.armed,
            coalesced: raw.coalesced,
            clockSteps: raw.clock_steps,
            batched: raw.batched,
            memoryBytes: raw.memory_bytes,
            takeovers: raw.takeovers
        )
    }

    func readThreadReport() -> ThreadReport {
        var info = mtr_engine_info()
        if let engine = self.raw { _ = mtr_engine_get_info(engine, &info) }
        return ThreadReport(
            realtimePriority: info.realtime_priority > 0 ? Int(info.realtime_priority) : nil,
            realtimeRefusal: info.realtime_error != 0
                ? TimerError(code: info.realtime_error, operation: "pthread_setschedparam") : nil,
            cpu: info.cpu >= 0 ? Int(info.cpu) : nil,
            cpuRefusal: info.cpu_error != 0
                ? TimerError(code: info.cpu_error, operation: "pthread_setaffinity_np") : nil,
            threadName: withUnsafeBytes(of: info.name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        )
    }

    func reevaluate(_ clock: TimerClock) {
        if let raw = self.raw { _ = mtr_engine_clock_changed(raw, clock.coreClock) }
    }
}
#endif
