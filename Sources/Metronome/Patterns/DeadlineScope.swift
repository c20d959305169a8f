import Glibc

/// One deadline from the call's start to its end: its watch and its timer, armed as the
/// call begins and disarmed as it ends. What every `withDeadline` does besides binding the
/// watch and running the body, apart from the generic function so that it is compiled once,
/// for its own types.
struct DeadlineScope {
    private(set) var watch: DeadlineWatch
    private let timer: DeadlineTimer

    /// Watches the current task until `expiration`, timed by `firing` (the shared engine for
    /// `nil`), with `tolerance` for the engine to share wake-ups. A deadline that has passed
    /// by `now` (read here when `nil`), or that the engine refuses, cancels the task at once.
    @inline(never)
    init(_ expiration: TimerInstant, now: Int64?, tolerance: Duration?, firing: (any TimerFiring)?) {
        let idle = IdleDeadlineTimers.current
        // An async function always runs in a task.
        self.watch = withUnsafeCurrentTask { task in
            idle.watch(task: task!, deadline: expiration, outer: DeadlineWatch.inForce)
        }
        self.timer = DeadlineTimer(firing, clock: expiration.clock, idle: idle)
        let deadline = expiration.nanoseconds
        if deadline <= now ?? self.timer.core.now() {
            self.watch.cancelAtOnce(passed: true)
        } else {
            let window = min(max(tolerance?.saturatingNanoseconds ?? 0, 0), Int64.max - deadline)
            let schedule = TimerSchedule(deadlineNanoseconds: deadline, leewayNanoseconds: window)!
            if !self.timer.arm(schedule, for: self.watch) { self.watch.cancelAtOnce(passed: false) }
        }
    }

    /// Closes the deadline once the body has ended, on the thread it ended on, whose idle
    /// timers take the timer and the watch back.
    @inline(never)
    mutating func end() {
        self.watch.end()
        let idle = IdleDeadlineTimers.current
        self.timer.end(idle: idle)
        idle.giveBack(&self.watch)
    }
}

/// A deadline's timer. On the shared engine it is one of the current thread's idle ones,
/// armed anew (a move of its C timer) and disarmed when the call ends, so that a call makes
/// no timer: the shared engine is never stopped, so its timers outlive any call. On another
/// backend, which may stop, a timer of the call's own tells the deadline when the engine
/// lets go of it unfired.
struct DeadlineTimer {
    let core: TimerCore
    /// Whether the timer is one of the shared engine's idle ones.
    private let isShared: Bool

    /// A timer of `firing`, or of the shared engine for `nil`.
    init(_ firing: (any TimerFiring)?, clock: TimerClock, idle: IdleDeadlineTimers) {
        if let firing, (firing as? TimerEngine)?.isShared != true {
            self.core = TimerCore.make(delivery: nil, firing: firing, clock: clock)
            self.isShared = false
        } else {
            self.core = idle.take(on: clock)
            self.isShared = true
        }
    }

    /// Arms `schedule` to end `watch`'s deadline: `false` when the engine refused it or
    /// stopped meanwhile, and the deadline can no longer be timed.
    func arm(_ schedule: TimerSchedule, for watch: DeadlineWatch) -> Bool {
        let scheduled: Bool?
        if self.isShared {
            // The handler holds only the watch, which serves as its context: no allocation.
            scheduled = try? self.core.schedule(schedule) { [watch] _ in watch.deadlinePassed() }
        } else {
            // The handler alone holds the release: when the engine lets go of the handler
            // without running it, the engine has stopped (or refused the arming).
            scheduled = try? self.core.schedule(schedule) { [release = DeadlineRelease(watch)] _ in
                release.watch.deadlinePassed()
            }
        }
        return scheduled == true && watch.armed()
    }

    /// Disarms the timer for good: back to the thread's idle ones, or retired.
    func end(idle: IdleDeadlineTimers) {
        if self.isShared { idle.giveBack(self.core) } else { self.core.ownerGone() }
    }
}

/// The shared engine's deadline timers and the watches that no call is using, a few per
/// thread: a call takes them on the thread it starts on and gives them back on the one it
/// ends on, with no lock, so threads share nothing but the engine.
final class IdleDeadlineTimers {
    /// As many as deadlines nested at once on a thread, in the common case; a deeper nest
    /// retires the timers it made.
    private static let perThread = 4

    // Reached only from the thread that owns it.
    @exclusivity(unchecked) private var timers: [TimerCore] = []
    @exclusivity(unchecked) private var watches: [DeadlineWatch] = []
    /// The process's fork count when `timers` were made: in a forked child they are timers
    /// of the parent's shared engine, which is dead there.
    @exclusivity(unchecked) private var fork = ForkGeneration.current

    private init() {
        self.timers.reserveCapacity(Self.perThread)
        self.watches.reserveCapacity(Self.perThread)
    }

    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key) { stored in
            // The thread ends, and its idle timers with it.
            guard let stored else { return }
            let idle = Unmanaged<IdleDeadlineTimers>.fromOpaque(stored).takeRetainedValue()
            guard idle.fork == ForkGeneration.current else { return }
            for timer in idle.timers { timer.ownerGone() }
        }
        return key
    }()

    /// The current thread's.
    static var current: IdleDeadlineTimers {
        if let stored = pthread_getspecific(self.key) {
            return Unmanaged<IdleDeadlineTimers>.fromOpaque(stored).takeUnretainedValue()
        }
        let idle = IdleDeadlineTimers()
        pthread_setspecific(self.key, Unmanaged.passRetained(idle).toOpaque())
        return idle
    }

    /// An idle timer of the shared engine on `clock`, or a new one.
    func take(on clock: TimerClock) -> TimerCore {
        let fork = ForkGeneration.current
        if self.fork != fork {
            // Left alone: the parent's engine, not this process's, holds them.
            self.timers.removeAll(keepingCapacity: true)
            self.fork = fork
        }
        if let index = self.timers.lastIndex(where: { $0.clock == clock }) { return self.timers.remove(at: index) }
        return TimerCore.make(delivery: nil, firing: TimerEngine.shared, clock: clock)
    }

    /// A watch for a new deadline: one the thread keeps, or a new one.
    func watch(task: UnsafeCurrentTask, deadline: TimerInstant, outer: DeadlineWatch?) -> DeadlineWatch {
        guard let watch = self.watches.popLast() else {
            return DeadlineWatch(task: task, deadline: deadline, outer: outer)
        }
        watch.reuse(task: task, deadline: deadline, outer: outer)
        return watch
    }

    /// Keeps `watch`, whose scope has ended, for the next call on this thread, unless
    /// anything else still holds it: an unstructured task that copied the binding, or a
    /// handler still running on the firing thread. Kept only then, no reader can ever see it
    /// change.
    func giveBack(_ watch: inout DeadlineWatch) {
        watch.release()
        guard self.watches.count < Self.perThread, isKnownUniquelyReferenced(&watch) else { return }
        self.watches.append(watch)
    }

    /// Disarms `timer` and keeps it for the next call on this thread.
    func giveBack(_ timer: TimerCore) {
        _ = timer.cancel()
        guard self.timers.count < Self.perThread, self.fork == ForkGeneration.current else { return timer.ownerGone() }
        self.timers.append(timer)
    }
}
