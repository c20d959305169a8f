@preconcurrency import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Fires timers from GCD `DispatchSourceTimer`s: the comparison path.
///
/// Each schedule gets its own source, activated at once and cancelled when disarmed. A
/// source that is never suspended and never left inactive can always be released, so the
/// libdispatch crashes Swift code commonly meets (over-resume, releasing a suspended or
/// inactive source) cannot happen here by construction.
struct DispatchBackend: TimerBackend {
    /// Where handlers run when the timer was given no queue.
    let fallbackQueue: DispatchQueue

    func arm(
        _ schedule: TimerSchedule,
        clock: TimerClock,
        queue: DispatchQueue?,
        fire: @escaping @Sendable (Tick) -> Void
    ) -> (any ArmedTimer)? {
        let source = DispatchSource.makeTimerSource(queue: queue ?? self.fallbackQueue)
        let repeating = schedule.periodNanoseconds.map { DispatchTimeInterval.nanoseconds(Int($0)) } ?? .never
        let leeway = DispatchTimeInterval.nanoseconds(Int(schedule.leewayNanoseconds))
        let deadline = schedule.deadlineNanoseconds
        switch clock {
        case .monotonic:
            source.schedule(
                deadline: DispatchTime(uptimeNanoseconds: UInt64(deadline)), repeating: repeating, leeway: leeway)
        case .boottime:
            // GCD offers no boottime deadline: convert once, at arming.
            let delta = deadline.addingSaturating(-clock.nanosecondsNow)
            source.schedule(deadline: .now() + .nanoseconds(Int(delta)), repeating: repeating, leeway: leeway)
        case .wall:
            // dispatch_walltime reads 0 and 1 ns as DISPATCH_TIME_FOREVER.
            let deadline = max(deadline, 2)
            let wall = DispatchWallTime(
                timespec: timespec(
                    tv_sec: Int(deadline / nanosecondsPerSecond), tv_nsec: Int(deadline % nanosecondsPerSecond))
            )
            source.schedule(wallDeadline: wall, repeating: repeating, leeway: leeway)
        }
        // GCD runs a source's handler once at a time, but on a concurrent queue on any of its
        // threads, and ThreadSanitizer sees no order between them: a lock says it.
        let ticks = LockedBox(DispatchTickCounter(schedule: schedule))
        source.setEventHandler {
            let now = clock.nanosecondsNow
            if let tick = ticks.withLockedValue({ $0.next(firedNanoseconds: now) }) { fire(tick) }
        }
        source.activate()
        return DispatchArmedTimer(source: source)
    }
}

/// Rebuilds what GCD does not report: which deadline a firing stands for and how many it
/// skipped, with the engine's meaning (see ``Tick``).
private struct DispatchTickCounter {
    private let schedule: TimerSchedule
    private var nextSequence: UInt64 = 0

    init(schedule: TimerSchedule) {
        self.schedule = schedule
    }

    /// The tick for an event handled at `now`, or `nil` for an event GCD delivers for a
    /// deadline an earlier, late tick already covered.
    mutating func next(firedNanoseconds now: Int64) -> Tick? {
        var sequence = self.nextSequence
        if let period = self.schedule.periodNanoseconds, now > self.schedule.deadlineNanoseconds {
            // The latest deadline that has passed; the ones between are skipped.
            let passed = UInt64((now - self.schedule.deadlineNanoseconds) / period)
            guard passed >= sequence else { return nil }
            sequence = passed
        }
        let (offset, overflow) = Int64(clamping: sequence).multipliedReportingOverflow(
            by: self.schedule.periodNanoseconds ?? 0)
        let scheduled = overflow ? .max : self.schedule.deadlineNanoseconds.addingSaturating(offset)
        let tick = Tick(
            scheduled: TimerInstant(nanoseconds: scheduled),
            fired: TimerInstant(nanoseconds: now),
            missed: Int(clamping: sequence - self.nextSequence),
            sequence: sequence
        )
        self.nextSequence = sequence + 1
        return tick
    }
}

private struct DispatchArmedTimer: @unchecked Sendable, ArmedTimer {
    // DispatchSourceTimer is not Sendable on Linux; cancel and setEventHandler are
    // thread-safe in libdispatch.
    let source: any DispatchSourceTimer

    func disarm() {
        self.source.cancel()
        self.source.setEventHandler(handler: nil)
    }
}
