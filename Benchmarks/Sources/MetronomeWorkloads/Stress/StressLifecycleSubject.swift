@preconcurrency import Dispatch
import Glibc
import Metronome
import MetronomeMeasurements
import MetronomeTestSupport
import Synchronization

/// `metronome stress`'s lifecycle faults: engines shut down and replaced while other
/// threads operate on their timers, handlers that shut down or drop their own engine or shut
/// down each other's, handlers that fork, a timer that outruns its period beside timers on
/// another clock and another shard, and forked children that use the library and create
/// engines with too few descriptors.
///
/// Checked: no handler starts after `cancelAndWait()` returned; every handler context is
/// released by the end; no engine (each names its firing thread) outlives the run; every
/// forked child exits cleanly (a fresh shared engine fires, engine creation answers
/// `EMFILE` or succeeds at whatever count of free descriptors); an engine whose handler
/// forked still fires; the neighbours of a busy timer fire while it runs. A crash is its
/// own verdict.
final class StressLifecycleSubject: StressSubject {
    enum Operation: String, CaseIterable {
        case operate, shutdownEngine, handlerShutsDown, handlerDropsEngine, fork
        case handlerForks, handlersShutDownEachOther, busyBesideNeighbours

        /// Out of every 100,000 operations.
        var weight: Int {
            switch self {
            case .operate: 99_640
            case .shutdownEngine: 100
            case .handlerShutsDown: 90
            case .handlerDropsEngine: 90
            case .fork: 20
            case .handlerForks: 10
            case .handlersShutDownEachOther: 40
            case .busyBesideNeighbours: 10
            }
        }
    }

    /// A timer and whether `cancelAndWait()` has returned for it.
    private final class Tracked: Sendable {
        let timer: SafeDispatchTimer
        let closed = Atomic<Bool>(false)

        init(_ timer: SafeDispatchTimer) {
            self.timer = timer
        }
    }

    /// Keeps a timer until its own handler drops it.
    private final class Holder: Sendable {
        let timer = LockedCondition<SafeDispatchTimer?>(nil)
    }

    /// Names every engine's firing thread, so engines alive at the end can be counted.
    static let threadName = "stress-life"
    static let slotCount = 64

    let name = "lifecycle"
    let operationNames = Operation.allCases.map(\.rawValue)

    private let engine: LockedCondition<TimerEngine?>
    private let slots = (0..<StressLifecycleSubject.slotCount).map { _ in LockedCondition<Tracked?>(nil) }
    private let live = StressLiveObjects()
    private let entries = Atomic<Int>(0)
    private let forks = Atomic<Int>(0)
    /// Timers expected to fire (after a fork in a handler, beside a busy timer) and fired.
    private let expected = Atomic<Int>(0)
    private let fired = Atomic<Int>(0)
    private let violations: StressViolations
    private let weights = Operation.allCases.map(\.weight)

    init(violations: StressViolations) throws {
        self.violations = violations
        self.engine = LockedCondition(try Self.makeEngine())
    }

    private static func makeEngine() throws(TimerError) -> TimerEngine {
        try TimerEngine(configuration: .init(name: Self.threadName))
    }

    func step(_ random: inout SplitMix64) -> Int {
        let index = random.pick(weights: self.weights, total: self.weights.reduce(0, +))
        switch Operation.allCases[index] {
        case .operate: self.operate(&random)
        case .shutdownEngine: self.replaceEngine()
        case .handlerShutsDown: self.armSelfShutdown(&random)
        case .handlerDropsEngine: self.armSelfDrop(&random)
        case .fork: self.forkChild(&random)
        case .handlerForks: self.armForkingHandler(&random)
        case .handlersShutDownEachOther: self.armMutualShutdown(&random)
        case .busyBesideNeighbours: self.armBusyBesideNeighbours(&random)
        }
        return index
    }

    /// Schedules, reschedules, cancels (and waits) or drops a pooled timer, on whatever
    /// engine it was made on, running or shut down.
    private func operate(_ random: inout SplitMix64) {
        let slot = self.slots[Int(random.next(below: Int64(self.slots.count)))]
        switch random.next(below: 4) {
        case 0:
            guard let engine = self.engine.withLock({ $0 }) else { return }
            let tracked = Tracked(SafeDispatchTimer(backend: .engine(engine)))
            self.schedule(
                tracked, in: .microseconds(Int(random.next(below: 3_000))), repeating: random.next(below: 2) == 0)
            let old = slot.withLock { current in
                defer { current = tracked }
                return current
            }
            withExtendedLifetime(old) {}
        case 1:
            slot.withLock { $0 }?.timer.reschedule(deadline: .now() + .microseconds(Int(random.next(below: 3_000))))
        case 2:
            guard let tracked = slot.withLock({ $0 }) else { return }
            tracked.timer.cancelAndWait()
            tracked.closed.store(true, ordering: .releasing)
        default:
            let old = slot.withLock { current in
                defer { current = nil }
                return current
            }
            withExtendedLifetime(old) {}
        }
    }

    private func schedule(_ tracked: Tracked, in delay: DispatchTimeInterval, repeating: Bool) {
        let context = StressHandlerContext(token: 0, repeating: repeating, live: self.live)
        tracked.timer.schedule(deadline: .now() + delay, repeating: repeating ? .milliseconds(1) : .never) {
            [weak tracked] _ in
            withExtendedLifetime(context) {}
            self.entries.add(1, ordering: .relaxed)
            if tracked?.closed.load(ordering: .acquiring) == true {
                self.violations.record(
                    .afterCancelAndWait, subject: self.name, "a handler after cancelAndWait returned")
            }
        }
    }

    /// Shuts the current engine down while other threads keep operating on its timers.
    private func replaceEngine() {
        let fresh = try? Self.makeEngine()
        let old = self.engine.withLock { current in
            defer { current = fresh }
            return current
        }
        old?.syncShutdown()
    }

    /// A timer whose handler shuts down its own engine, beside a pooled timer on it.
    private func armSelfShutdown(_ random: inout SplitMix64) {
        guard let engine = try? Self.makeEngine() else { return }
        let timer = SafeDispatchTimer(backend: .engine(engine))
        let context = StressHandlerContext(token: 0, repeating: false, live: self.live)
        timer.schedule(deadline: .now() + .microseconds(Int(random.next(below: 2_000)))) { _ in
            withExtendedLifetime(context) {}
            engine.syncShutdown()
        }
        let neighbour = Tracked(SafeDispatchTimer(backend: .engine(engine)))
        self.schedule(neighbour, in: .milliseconds(1), repeating: true)
        let slot = self.slots[Int(random.next(below: Int64(self.slots.count)))]
        let old = slot.withLock { current in
            defer { current = neighbour }
            return current
        }
        withExtendedLifetime(old) {}
        // The timer is released here, armed: its deinit races its own firing.
    }

    /// A timer whose handler drops the last reference to it, and with it to its engine: the
    /// engine is destroyed from inside its own callback.
    private func armSelfDrop(_ random: inout SplitMix64) {
        guard let engine = try? Self.makeEngine() else { return }
        let holder = Holder()
        let timer = SafeDispatchTimer(backend: .engine(engine))
        let context = StressHandlerContext(token: 0, repeating: true, live: self.live)
        holder.timer.withLock { $0 = timer }
        timer.schedule(deadline: .now() + .microseconds(Int(random.next(below: 2_000))), repeating: .milliseconds(1)) {
            _ in
            withExtendedLifetime(context) {}
            let last = holder.timer.withLock { current in
                defer { current = nil }
                return current
            }
            withExtendedLifetime(last) {}
        }
    }

    /// Two engines whose handlers, due together, shut down each other's engine: neither
    /// waits for the other's firing thread, so both return and both engines end.
    private func armMutualShutdown(_ random: inout SplitMix64) {
        guard let first = try? Self.makeEngine(), let second = try? Self.makeEngine() else { return }
        let deadline = DispatchTime.now() + .microseconds(Int(random.next(below: 2_000)))
        for (mine, other) in [(first, second), (second, first)] {
            let holder = Holder()
            let timer = SafeDispatchTimer(backend: .engine(mine))
            let context = StressHandlerContext(token: 0, repeating: false, live: self.live)
            holder.timer.withLock { $0 = timer }
            timer.schedule(deadline: deadline) { _ in
                withExtendedLifetime(context) {}
                other.syncShutdown()
                holder.timer.withLock { $0 = nil }
            }
        }
    }

    /// A handler that forks. The child, a copy of the firing thread inside the handler,
    /// shuts down the engine it inherited from there, which must return at once, and exits;
    /// it uses no other part of the library, where a lock another thread held at the fork
    /// could hold it (`forkChild` covers a fresh engine in a child). The parent waits
    /// for it, then schedules a timer on the same engine, which must fire.
    private func armForkingHandler(_ random: inout SplitMix64) {
        guard Self.canFork, let engine = try? Self.makeEngine() else { return }
        let holder = Holder()
        let timer = SafeDispatchTimer(backend: .engine(engine))
        let context = StressHandlerContext(token: 0, repeating: false, live: self.live)
        holder.timer.withLock { $0 = timer }
        self.forks.add(1, ordering: .relaxed)
        timer.schedule(deadline: .now() + .microseconds(Int(random.next(below: 2_000)))) { _ in
            withExtendedLifetime(context) {}
            let pid = fork()
            if pid == 0 {
                engine.syncShutdown()
                _exit(0)
            }
            if pid > 0, let failure = StressChild.reap(pid) {
                self.violations.record(.forkedChild, subject: self.name, failure)
            }
            let next = SafeDispatchTimer(backend: .engine(engine))
            holder.timer.withLock { $0 = next }
            self.expected.add(1, ordering: .relaxed)
            next.schedule(deadline: .now() + .milliseconds(1)) { _ in
                self.fired.add(1, ordering: .relaxed)
                holder.timer.withLock { $0 = nil }
            }
        }
    }

    /// A repeating timer whose handler outruns its 1 ms period, on a two-shard engine,
    /// beside a one-shot on another clock and one made in the other shard: both must fire
    /// while the busy timer runs, which stops once they have (or after 2,000 firings).
    private func armBusyBesideNeighbours(_ random: inout SplitMix64) {
        guard let engine = try? TimerEngine(configuration: .init(name: Self.threadName, shards: 2)) else { return }
        let neighboursFired = Atomic<Int>(0)
        let busy = Holder()
        let timer = SafeDispatchTimer(backend: .engine(engine))
        busy.timer.withLock { $0 = timer }
        let firings = Atomic<Int>(0)
        timer.schedule(deadline: .now(), repeating: .milliseconds(1)) { _ in
            MonotonicTime.spin(nanoseconds: 2_000_000)
            let count = firings.add(1, ordering: .relaxed).newValue
            guard neighboursFired.load(ordering: .acquiring) == 2 || count >= 2_000 else { return }
            if count >= 2_000 {
                self.violations.record(
                    .starved, subject: self.name, "a neighbour of a busy timer did not fire in 2,000 of its periods")
            }
            let last = busy.timer.withLock { current in
                defer { current = nil }
                return current
            }
            _ = last?.cancel()
        }
        let delay = DispatchTimeInterval.microseconds(2_000 + Int(random.next(below: 3_000)))
        let clocks: [TimerClock] = [.boottime, .monotonic]
        for clock in clocks {
            // The monotonic neighbour is made on a thread of its own, which takes the
            // other shard (threads take shards in turn).
            let make: @Sendable () -> Void = {
                let holder = Holder()
                let neighbour = SafeDispatchTimer(backend: .engine(engine), clock: clock)
                holder.timer.withLock { $0 = neighbour }
                neighbour.schedule(deadline: .now() + delay) { _ in
                    neighboursFired.add(1, ordering: .releasing)
                    holder.timer.withLock { $0 = nil }
                }
            }
            if clock == .boottime {
                make()
            } else if let thread = try? PosixThread.spawn(make) {
                thread.join()
            }
        }
    }

    /// ThreadSanitizer cannot start threads in the child of a multi-threaded process (its
    /// own locks may be held there), and every child here starts engines: under it, the
    /// fork operation does nothing. The unit tests fork under it while the process is calm.
    static let canFork = dlsym(nil, "__tsan_init") == nil

    /// A child that creates an engine with a few descriptors free, then uses a shared engine
    /// of its own; it only makes library calls and then `_exit`s.
    private func forkChild(_ random: inout SplitMix64) {
        guard Self.canFork else { return }
        let free = rlim_t(random.next(below: 9))
        self.forks.add(1, ordering: .relaxed)
        if let failure = StressChild.run({ Self.childBody(freeDescriptors: free) }) {
            self.violations.record(.forkedChild, subject: self.name, failure)
        }
    }

    private static func childBody(freeDescriptors free: rlim_t) -> Int32 {
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        var lowered = limit
        let lowest = dup(STDIN_FILENO)
        close(lowest)
        lowered.rlim_cur = rlim_t(max(lowest, 0)) + free
        setrlimit(Int32(RLIMIT_NOFILE.rawValue), &lowered)
        do {
            _ = try TimerEngine()
        } catch  where error.code != EMFILE && error.code != ENFILE {
            return 3
        } catch {}
        setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)

        let fired = Atomic<Bool>(false)
        let timer = SafeDispatchTimer()
        guard
            timer.schedule(
                deadline: .now() + .milliseconds(1), handler: { _ in fired.store(true, ordering: .releasing) })
        else { return 4 }
        // Five seconds by the clock, not by a count of sleeps, which a loaded machine
        // stretches past the parent's ten.
        let giveUp = MonotonicTime.now() + 5_000_000_000
        while !fired.load(ordering: .acquiring) && MonotonicTime.now() < giveUp { usleep(1_000) }
        return fired.load(ordering: .acquiring) ? 0 : 5
    }

    func finish(operations: [Int], seconds: Double) -> StressResult {
        for slot in self.slots {
            guard let tracked = slot.withLock({ $0 }) else { continue }
            tracked.timer.cancelAndWait()
            tracked.closed.store(true, ordering: .releasing)
        }
        for slot in self.slots {
            let old = slot.withLock { current in
                defer { current = nil }
                return current
            }
            withExtendedLifetime(old) {}
        }
        let last = self.engine.withLock { current in
            defer { current = nil }
            return current
        }
        last?.syncShutdown()
        withExtendedLifetime(last) {}
        if !eventually(timeout: .seconds(10), { self.live.liveCount == 0 }) {
            let live = self.live.liveCount
            self.violations.record(
                .liveContexts, subject: self.name, count: live, "\(live) of \(self.live.createdCount) contexts alive")
        }
        if !eventually(
            timeout: .seconds(10), { self.fired.load(ordering: .relaxed) == self.expected.load(ordering: .relaxed) })
        {
            let missing = self.expected.load(ordering: .relaxed) - self.fired.load(ordering: .relaxed)
            self.violations.record(
                .starved, subject: self.name, count: missing, "\(missing) timers after a fork in a handler did not fire"
            )
        }
        if !eventually(timeout: .seconds(10), { Self.firingThreadsAlive() == 0 }) {
            let alive = Self.firingThreadsAlive()
            self.violations.record(.enginesAlive, subject: self.name, count: alive, "\(alive) engines outlived the run")
        }
        return StressResult(
            backend: self.name,
            seconds: seconds,
            operationsByKind: self.operationsByKind(operations),
            handlerEntries: self.entries.load(ordering: .relaxed),
            handlerContexts: self.live.createdCount,
            violations: self.violations.counts(subject: self.name)
        )
    }

    /// Threads of this subject's engines still running, by name.
    private static func firingThreadsAlive() -> Int {
        guard let tasks = opendir("/proc/self/task") else { return 0 }
        defer { closedir(tasks) }
        var count = 0
        while let entry = readdir(tasks) {
            let task = withUnsafeBytes(of: entry.pointee.d_name) {
                String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
            }
            guard let file = fopen("/proc/self/task/\(task)/comm", "r") else { continue }
            var name = [UInt8](repeating: 0, count: 32)
            let read = fread(&name, 1, name.count, file)
            if String(decoding: name.prefix(read), as: UTF8.self).hasPrefix(Self.threadName) { count += 1 }
            fclose(file)
        }
        return count
    }
}
