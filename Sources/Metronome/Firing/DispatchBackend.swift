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
        // The handler holds the source it moves, and the source its handler: disarming
        // clears the handler, which ends the cycle.
        source.setEventHandler {
            let now = clock.nanosecondsNow
            let (due, moved) = ticks.withLockedValue { $0.next(firedNanoseconds: now) }
            // A grid that moved (``MissedTickPolicy/delay``) is GCD's to follow from here.
            if let moved {
                let start = DispatchTime.now() + .nanoseconds(Int(moved.addingSaturating(-now)))
                source.schedule(deadline: start, repeating: repeating, leeway: leeway)
            }
            for tick in due { fire(tick) }
        }
        source.activate()
        return DispatchArmedTimer(source: source)
    }
}

/// Rebuilds what GCD does not report: which deadline a firing stands for and how many it
/// skipped, with the engine's meaning (see ``Tick``), and what the schedule's
/// ``MissedTickPolicy`` makes of a firing so late that later deadlines passed too.
struct DispatchTickCounter {
    private let schedule: TimerSchedule
    /// The deadline of sequence 0 on the grid now followed: the schedule's, until a late
    /// tick of a ``MissedTickPolicy/delay`` schedule moves it.
    private var start: Int64
    private var nextSequence: UInt64 = 0

    init(schedule: TimerSchedule) {
        self.schedule = schedule
        self.start = schedule.deadlineNanoseconds
    }

    /// The ticks for an event handled at `now`: none for an event GCD delivers for a
    /// deadline an earlier, late tick already covered; one, or for a late
    /// ``MissedTickPolicy/burst`` schedule one per deadline that passed. With them, the
    /// first deadline of a grid that a late ``MissedTickPolicy/delay`` tick moved.
    mutating func next(firedNanoseconds now: Int64) -> (ticks: [Tick], movedTo: Int64?) {
        guard let period = self.schedule.periodNanoseconds, now > self.start else {
            return ([self.tick(self.take(through: self.nextSequence), fired: now)], nil)
        }
        // The latest deadline that has passed; the ones between were missed.
        let passed = UInt64((now - self.start) / period)
        guard passed >= self.nextSequence else { return ([], nil) }
        guard passed > self.nextSequence else { return ([self.tick(self.take(through: passed), fired: now)], nil) }
        switch self.schedule.missedTicks {
        case .skip:
            return ([self.tick(self.take(through: passed), fired: now)], nil)
        case .burst:
            let ticks = (self.nextSequence...passed).map { sequence in
                self.tick(Missed(sequence: sequence, missed: 0), fired: now)
            }
            self.nextSequence = passed + 1
            return (ticks, nil)
        case .delay:
            let tick = self.tick(self.take(through: self.nextSequence), fired: now)
            // The next deadline a full period after this firing, as sequence `nextSequence`.
            let next = now.addingSaturating(period)
            let (offset, overflow) = Int64(clamping: self.nextSequence).multipliedReportingOverflow(by: period)
            self.start = overflow ? .min : next.addingSaturating(-offset)
            return ([tick], next)
        }
    }

    private struct Missed {
        let sequence: UInt64
        let missed: UInt64
    }

    /// Covers every deadline up to `sequence`, which the tick stands for.
    private mutating func take(through sequence: UInt64) -> Missed {
        let missed = Missed(sequence: sequence, missed: sequence - self.nextSequence)
        self.nextSequence = sequence + 1
        return missed
    }

    private func tick(_ missed: Missed, fired now: Int64) -> Tick {
        let (offset, overflow) = Int64(clamping: missed.sequence).multipliedReportingOverflow(
            by: self.schedule.periodNanoseconds ?? 0)
        let scheduled = overflow ? .max : self.start.addingSaturating(offset)
        return Tick(
            scheduled: TimerInstant(nanoseconds: scheduled),
            fired: TimerInstant(nanoseconds: now),
            missed: Int(clamping: missed.missed),
            sequence: missed.sequence
        )
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
