@preconcurrency import Dispatch
import Glibc
import Metronome
import MetronomeMeasurements
import MetronomeTestSupport
import Synchronization

/// `metronome stress`'s edges of an engine's life: `start(...)` and the deadline helper
/// racing `shutdown()`, one-shots due at once and the `armed` counter, and, each in a child
/// process with a bound (``StressChild``), an engine whose timerfds are closed under it, the
/// same with their numbers then taken by another engine, and a fork inside a release callback; processes spawned from a handler must stop on SIGTERM.
///
/// Most steps arm a one-shot due at once on the subject's own engine, or cancel one; at the
/// end, once every one of them fired or was cancelled, the engine counts none armed.
final class StressEdgesSubject: StressSubject {
    enum Operation: String, CaseIterable {
        case armDueNow, startRacesShutdown, deadlineRacesShutdown, oneShotsSettle
        case descriptorSweep, descriptorReuse, forkInRelease, spawnFromHandler

        /// Out of every 100,000 operations.
        var weight: Int {
            switch self {
            case .armDueNow: 99_835
            case .startRacesShutdown: 60
            case .deadlineRacesShutdown: 60
            case .oneShotsSettle: 25
            case .descriptorSweep: 5
            case .descriptorReuse: 5
            case .forkInRelease: 5
            case .spawnFromHandler: 5
            }
        }
    }

    /// A one-shot and whether it has settled: fired, or cancelled by a `cancel()` that
    /// returned `true`. Whichever comes first counts it.
    private final class OneShot: Sendable {
        let timer: SafeDispatchTimer
        private let done = Atomic<Bool>(false)

        init(_ timer: SafeDispatchTimer) {
            self.timer = timer
        }

        var isPending: Bool { !self.done.load(ordering: .acquiring) }

        /// Marks it settled; `true` the first time only.
        func settle() -> Bool {
            !self.done.exchange(true, ordering: .acquiringAndReleasing)
        }
    }

    let name = "edges"
    let operationNames = Operation.allCases.map(\.rawValue)

    private let engine: TimerEngine
    private let slots = (0..<64).map { _ in LockedCondition<OneShot?>(nil) }
    private let live = StressLiveObjects()
    private let armed = Atomic<Int>(0)
    private let settled = Atomic<Int>(0)
    private let entries = Atomic<Int>(0)
    private let violations: StressViolations
    private let weights = Operation.allCases.map(\.weight)
    /// Whether the thread that made the engine blocked SIGTERM: a process its handlers start
    /// inherits that mask, rightly (a test runner's pool thread may have started this process
    /// so), and then SIGTERM proves nothing.
    private let creatorBlocksSIGTERM: Bool

    init(violations: StressViolations) throws {
        self.violations = violations
        var mask = sigset_t()
        pthread_sigmask(SIG_BLOCK, nil, &mask)
        self.creatorBlocksSIGTERM = sigismember(&mask, SIGTERM) == 1
        self.engine = try TimerEngine()
    }

    func step(_ random: inout SplitMix64) -> Int {
        let index = random.pick(weights: self.weights, total: self.weights.reduce(0, +))
        switch Operation.allCases[index] {
        case .armDueNow: self.armDueNow(&random)
        case .startRacesShutdown: self.startRacesShutdown()
        case .deadlineRacesShutdown: self.deadlineRacesShutdown()
        case .oneShotsSettle: self.oneShotsSettle(&random)
        case .descriptorSweep: self.inChild(.descriptorSweep, StressEdgeChildren.descriptorSweep)
        case .descriptorReuse: self.inChild(.descriptorReuse, StressEdgeChildren.descriptorReuse)
        case .forkInRelease: self.inChild(.forkInRelease, StressEdgeChildren.forkInRelease)
        case .spawnFromHandler: self.spawnFromHandler(&random)
        }
        return index
    }

    /// Arms a one-shot due now in a slot, or cancels the slot's one; the one it replaces
    /// stays counted until it settles, by firing or by that cancel.
    private func armDueNow(_ random: inout SplitMix64) {
        let slot = self.slots[Int(random.next(below: Int64(self.slots.count)))]
        if random.next(below: 3) == 0 {
            guard let shot = slot.withLock({ $0 }), shot.timer.cancel(), shot.settle() else { return }
            self.settled.add(1, ordering: .relaxed)
            return
        }
        let shot = self.arm(on: self.engine)
        let old = slot.withLock { current in
            defer { current = shot }
            return current
        }
        // Dropped, the old one is cancelled by its deinit, which says nothing: keep it
        // armed until it fires, which it does at once.
        if let old { self.keepUntilSettled(old) }
    }

    private func arm(on engine: TimerEngine) -> OneShot {
        let shot = OneShot(SafeDispatchTimer(backend: .engine(engine)))
        let context = StressHandlerContext(token: 0, repeating: false, live: self.live)
        self.armed.add(1, ordering: .relaxed)
        shot.timer.schedule(deadline: .now()) { [weak shot] _ in
            withExtendedLifetime(context) {}
            self.entries.add(1, ordering: .relaxed)
            if shot?.settle() == true { self.settled.add(1, ordering: .relaxed) }
        }
        return shot
    }

    private let keeping = LockedCondition<[OneShot]>([])

    private func keepUntilSettled(_ shot: OneShot) {
        self.keeping.withLock { kept in
            kept.append(shot)
            if kept.count > 256 { kept.removeAll { !$0.isPending } }
        }
    }

    /// `start(...)` from another thread while the engine shuts down: every call that meets
    /// the stopping engine must answer `.engineShutDown`. The shutdown comes once the
    /// starts are under way, so that it lands among them.
    private func startRacesShutdown() {
        guard let engine = try? TimerEngine() else { return }
        let started = LockedCondition(0)
        let starters = (0..<Self.racers).compactMap { _ in
            try? PosixThread.spawn {
                var first = true
                for _ in 0..<1_000 {
                    do {
                        try SafeDispatchTimer(backend: .engine(engine)).start(after: .milliseconds(50)) { _ in }
                    } catch let error as TimerError where error == .engineShutDown {
                        break
                    } catch {
                        self.violations.record(.wrongShutdownError, subject: self.name, "start threw \(error)")
                        break
                    }
                    if first { started.update { $0 += 1 } }
                    first = false
                }
                if first { started.update { $0 += 1 } }
            }
        }
        _ = started.wait(timeout: .seconds(10)) { $0 == starters.count }
        engine.syncShutdown()
        for starter in starters { starter.join() }
    }

    /// Threads (or tasks) whose calls race one shutdown.
    static let racers = 4

    /// `withDeadline` from a task while the engine shuts down: each call returns, and a
    /// deadline the stopped engine can no longer time runs its body cancelled, never
    /// unbounded; a call made once the shutdown returned runs its body cancelled. The
    /// deadline is long, so that a loaded machine cannot let it pass before the call arms it.
    private func deadlineRacesShutdown() {
        guard let engine = try? TimerEngine() else { return }
        let clock = EngineClock(backend: .engine(engine))
        let started = LockedCondition(0)
        let finished = LockedCondition(0)
        for _ in 0..<Self.racers {
            Task.detached {
                var first = true
                for _ in 0..<1_000 {
                    let ranCancelled = await withDeadline(in: .seconds(10), clock: clock) { Task.isCancelled }
                    if first { started.update { $0 += 1 } }
                    first = false
                    if ranCancelled { break }
                }
                finished.update { $0 += 1 }
            }
        }
        _ = started.wait(timeout: .seconds(10)) { $0 == Self.racers }
        engine.syncShutdown()
        if !finished.wait(timeout: .seconds(10), until: { $0 == Self.racers }) {
            self.violations.record(.stall, subject: self.name, "withDeadline did not return in 10 s after a shutdown")
        }
        let afterStop = LockedCondition<Bool?>(nil)
        Task.detached {
            let ranCancelled = await withDeadline(in: .seconds(10), clock: clock) { Task.isCancelled }
            afterStop.update { $0 = ranCancelled }
        }
        if !afterStop.wait(timeout: .seconds(10), until: { $0 != nil }) {
            self.violations.record(
                .stall, subject: self.name, "withDeadline on a stopped engine did not return in 10 s")
        } else if afterStop.wait(timeout: .seconds(0), until: { $0 == true }) == false {
            self.violations.record(
                .wrongShutdownError, subject: self.name, "withDeadline on a stopped engine ran its body uncancelled")
        }
    }

    /// One-shots due at once on an engine of their own, some cancelled: once each fired or
    /// was cancelled, the engine counts none armed.
    private func oneShotsSettle(_ random: inout SplitMix64) {
        guard let engine = try? TimerEngine() else { return }
        let count = 32
        var shots: [OneShot] = []
        for _ in 0..<count {
            let shot = self.arm(on: engine)
            if random.next(below: 4) == 0, shot.timer.cancel(), shot.settle() {
                self.settled.add(1, ordering: .relaxed)
            }
            shots.append(shot)
        }
        if !eventually(seconds: 10, { shots.allSatisfy { !$0.isPending } }) {
            self.violations.record(
                .starved, subject: self.name, "a one-shot due at once neither fired nor was cancelled")
        } else if !eventually(seconds: 1, { engine.counters.armed == 0 }) {
            self.violations.record(
                .armedAfterSettled, subject: self.name,
                "\(engine.counters.armed) of \(count) one-shots still counted armed after all fired or were cancelled")
        }
        engine.syncShutdown()
    }

    /// A handler that spawns `sleep 30` (by `posix_spawn` or by fork and exec); SIGTERM must
    /// stop it within ``sigtermBound``.
    private func spawnFromHandler(_ random: inout SplitMix64) {
        let byFork = random.next(below: 2) == 0
        guard byFork ? StressLifecycleSubject.canFork : true, !self.creatorBlocksSIGTERM else { return }
        let spawned = LockedCondition<pid_t?>(nil)
        let timer = SafeDispatchTimer(backend: .engine(self.engine))
        timer.schedule(deadline: .now()) { _ in
            let pid = StressEdgeChildren.spawnSleep(byFork: byFork)
            spawned.update { $0 = pid }
        }
        guard spawned.wait(timeout: .seconds(10), until: { $0 != nil }), let pid = spawned.withLock({ $0 }), pid > 0
        else { return }  // no process to spare: not the library's fault
        kill(pid, SIGTERM)
        var status: Int32 = 0
        let deadline = MonotonicTime.now() + Self.sigtermBound
        while waitpid(pid, &status, WNOHANG) == 0 {
            if MonotonicTime.now() > deadline {
                self.violations.record(
                    .spawnIgnoresSigterm, subject: self.name,
                    "\(byFork ? "fork+exec" : "posix_spawn") child alive \(Self.sigtermBound / 1_000_000) ms after SIGTERM"
                )
                kill(pid, SIGKILL)
                waitpid(pid, &status, 0)
                return
            }
            usleep(1_000)
        }
    }

    /// How long a spawned `sleep` may outlive its SIGTERM.
    static let sigtermBound: Int64 = 2_000_000_000

    private func inChild(_ invariant: StressInvariant, _ body: () -> Int32) {
        guard StressLifecycleSubject.canFork, let failure = StressChild.run(body) else { return }
        self.violations.record(invariant, subject: self.name, failure)
    }

    func finish(operations: [Int], seconds: Double) -> StressResult {
        if !eventually(seconds: 10, { self.settled.load(ordering: .relaxed) == self.armed.load(ordering: .relaxed) }) {
            let pending = self.armed.load(ordering: .relaxed) - self.settled.load(ordering: .relaxed)
            self.violations.record(
                .starved, subject: self.name, count: pending, "\(pending) one-shots due at once never settled")
        } else if !eventually(seconds: 1, { self.engine.counters.armed == 0 }) {
            self.violations.record(
                .armedAfterSettled, subject: self.name,
                "\(self.engine.counters.armed) timers counted armed after every one-shot fired or was cancelled")
        }
        let counters = self.engine.counters
        for slot in self.slots { slot.withLock { $0 = nil } }
        self.keeping.withLock { $0 = [] }
        self.engine.syncShutdown()
        if !eventually(seconds: 10, { self.live.liveCount == 0 }) {
            let live = self.live.liveCount
            self.violations.record(
                .liveContexts, subject: self.name, count: live, "\(live) of \(self.live.createdCount) contexts alive")
        }
        return StressResult(
            backend: self.name,
            seconds: seconds,
            operationsByKind: self.operationsByKind(operations),
            handlerEntries: self.entries.load(ordering: .relaxed),
            handlerContexts: self.live.createdCount,
            violations: self.violations.counts(subject: self.name),
            engineCounters: counters
        )
    }
}
