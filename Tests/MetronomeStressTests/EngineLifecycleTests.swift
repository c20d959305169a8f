@preconcurrency import Dispatch
import Foundation
import Glibc
import Metronome
import MetronomeTestSupport
import Synchronization
import Testing

/// The edges of an engine's life seen through the Swift API: shutdown racing timer
/// operations on other threads, fork, and configurations that cannot be honoured.
@Suite(.serialized)
struct EngineLifecycleTests {
    /// ThreadSanitizer does not support threads started in the child of a fork taken while
    /// other threads run: its runtime's own locks may be held there, and a child then hangs
    /// in it.
    static let underThreadSanitizer = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "__tsan_init") != nil

    enum Operation: String, CaseIterable, Sendable {
        case cancel, reschedule, suspendResume, drop
    }

    /// 20,000 timers on an engine, one thread cancelling, rescheduling, suspending or
    /// dropping them while another shuts the engine down: no crash, every handler released,
    /// and afterwards no timer arms again.
    @Test(.timeLimit(.minutes(2)), arguments: Operation.allCases)
    func shutdownRacingTimerOperations(operation: Operation) throws {
        let engine = try TimerEngine()
        let contexts = LiveContexts()
        let timers = LockedBox<[SafeDispatchTimer?]>([])
        for k in 0..<20_000 {
            let timer = SafeDispatchTimer(backend: .engine(engine))
            let context = contexts.make()
            #expect(
                timer.schedule(deadline: .now() + .milliseconds(k % 40), repeating: .milliseconds(7)) { _ in
                    withExtendedLifetime(context) {}
                })
            timers.withLockedValue { $0.append(timer) }
        }
        let started = DispatchSemaphore(value: 0)
        let finished = DispatchSemaphore(value: 0)
        Thread {
            started.signal()
            for round in 0..<3 {
                for index in 0..<20_000 {
                    let timer = timers.withLockedValue { $0[index] }
                    switch operation {
                    case .cancel: timer?.cancel()
                    case .reschedule: timer?.reschedule(deadline: .now() + .milliseconds(round + 1))
                    case .suspendResume: if timer?.suspend() == true { timer?.resume() }
                    case .drop: timers.withLockedValue { $0[index] = nil }
                    }
                }
            }
            finished.signal()
        }.start()
        started.wait()
        engine.syncShutdown()
        #expect(finished.wait(timeout: .now() + 60) == .success)

        for index in stride(from: 0, to: 20_000, by: 100) {
            guard let timer = timers.withLockedValue({ $0[index] }) else { continue }
            timer.cancel()
            #expect(!timer.schedule(deadline: .now()) { _ in }, "a timer armed on a stopped engine")
        }
        #expect(engine.counters.armed == 0)
        timers.withLockedValue { $0.removeAll() }
        #expect(eventually { contexts.count == 0 }, "\(contexts.count) handler contexts leaked")
    }

    /// A spin window above the maximum is refused, naming the setting and its range; so
    /// are a priority out of range and a late threshold that is not positive.
    @Test func configurationThatCannotBeHonouredIsRefusedByName() {
        let refused: [(TimerEngine.Configuration, String)] = [
            (.init(spinWindow: .seconds(2)), "spinWindow"),
            (.init(spinWindow: TimerEngine.Configuration.maximumSpinWindow + .nanoseconds(1)), "spinWindow"),
            (.init(spinWindow: .nanoseconds(-1)), "spinWindow"),
            (.init(realtimePriority: 200), "realtimePriority"),
            (.init(realtimePriority: 0), "realtimePriority"),
            (.init(cpu: 1 << 20), "cpu"),
            (.init(lateThreshold: .zero), "lateThreshold"),
        ]
        for (configuration, setting) in refused {
            #expect {
                _ = try TimerEngine(configuration: configuration)
            } throws: { error in
                guard let error = error as? TimerError else { return false }
                return error.code == EINVAL && "\(error)".contains(setting)
            }
        }
        #expect(
            (try? TimerEngine(configuration: .init(spinWindow: TimerEngine.Configuration.maximumSpinWindow))) != nil)
    }

    /// A one-shot that fired leaves its C timer to the timer that armed it, to be disarmed
    /// by the next schedule or by the timer's release: rescheduling it many times holds one
    /// C timer, and dropping it releases everything, down to the engine.
    @Test(.timeLimit(.minutes(1)))
    func firedOneShotsAreReleasedWithTheirTimer() throws {
        weak var released: TimerEngine?
        do {
            let engine = try TimerEngine()
            released = engine
            let timer = SafeDispatchTimer(backend: .engine(engine))
            let fired = DispatchSemaphore(value: 0)
            for _ in 0..<100 {
                #expect(timer.schedule(after: .zero) { _ in fired.signal() })
                #expect(fired.wait(timeout: .now() + 5) == .success)
                #expect(eventually { timer.state == .idle })
            }
            // The spent C timers are given back as each new schedule disarms its
            // predecessor: memory stays at one timer's.
            let held = engine.counters.memoryBytes
            #expect(timer.schedule(after: .zero) { _ in fired.signal() })
            #expect(fired.wait(timeout: .now() + 5) == .success)
            #expect(eventually { timer.state == .idle && engine.counters.memoryBytes <= held })
        }
        #expect(eventually { released == nil }, "a fired one-shot kept its timer, and the engine, alive")
    }

    /// Firing threads carry a name: the configured one, or metronome-N.
    @Test(.needsTheEngine("names a firing thread"))
    func firingThreadsAreNamed() throws {
        let named = try TimerEngine(configuration: .init(name: "pacer"))
        #expect(named.threadReport.threadName == "pacer")
        // A thread of another test may end between the listing and the read: skip it.
        let threadNames = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").compactMap {
            try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8)
        }
        #expect(threadNames.contains("pacer\n"))
        let numbered = try TimerEngine()
        #expect(numbered.threadReport.threadName.hasPrefix("metronome-"))
    }

    static let forkVariable = "METRONOME_FORK_CHILD"

    /// Each test below that forks runs in a process of its own, so that nothing the fork
    /// leaves behind reaches the test runner: this test binary again, running only that test.
    @Test(
        .needsTheEngine("forks: libdispatch does not run in a forked child"),
        .timeLimit(.minutes(2)),
        arguments: [
            "forkedChildGetsAFreshSharedEngine", "childForkedMidHandlerWaitsForNoHandler",
            "forkedChildKeepsExpiringValuesApart",
        ])
    func forkingTestInAProcessOfItsOwn(test: String) throws {
        try expectTestPassesInAProcessOfItsOwn(test, enabledBy: Self.forkVariable)
    }

    /// `TimerEngine.shared` in a forked child is a new engine that fires; the parent's
    /// engine is dead there (a timer of it neither arms nor moves), and the parent's timers
    /// are untouched.
    @Test(.enabled(if: ProcessInfo.processInfo.environment[forkVariable] != nil), .timeLimit(.minutes(1)))
    func forkedChildGetsAFreshSharedEngine() throws {
        let parentShared = TimerEngine.shared
        let parentFired = DispatchSemaphore(value: 0)
        let parentTimer = SafeDispatchTimer()
        // Far enough that the parent's timer is still running in the child, and that the
        // fork cannot find the firing thread inside it, however late a loaded machine forks.
        let deadline = DispatchTime.now() + .seconds(2)
        #expect(parentTimer.schedule(deadline: deadline) { _ in parentFired.signal() })
        // Pushed once under the lock, which publishes its deadline for pushes without it.
        #expect(parentTimer.reschedule(deadline: deadline))

        let pid = fork()
        if pid == 0 {
            // The child: only what it needs, then _exit, never back into the test runner.
            let stale = SafeDispatchTimer(backend: .engine(parentShared))
            let staleArmed = stale.schedule(deadline: .now()) { _ in }
            guard !staleArmed else { _exit(10) }
            // The parent's timer pushed later is refused here, not kept for a firing that
            // never comes, though the parent published its deadline for pushes.
            let pushed = parentTimer.reschedule(deadline: deadline + .seconds(1))
            guard !pushed, parentTimer.state == .cancelled else { _exit(14) }
            guard TimerEngine.shared !== parentShared else { _exit(11) }
            let fired = Atomic<Bool>(false)
            let timer = SafeDispatchTimer()
            let armed = timer.schedule(deadline: .now() + .milliseconds(10)) { _ in
                fired.store(true, ordering: .releasing)
            }
            guard armed else { _exit(12) }
            for _ in 0..<10_000 where !fired.load(ordering: .acquiring) { usleep(1_000) }
            _exit(fired.load(ordering: .acquiring) ? 0 : 13)
        }
        try #require(pid > 0)
        var status: Int32 = 0
        #expect(waitpid(pid, &status, 0) == pid)
        #expect(status & 0x7f == 0 && (status >> 8) & 0xff == 0, "child status \(status)")
        #expect(TimerEngine.shared === parentShared, "the parent's shared engine was replaced")
        #expect(parentFired.wait(timeout: .now() + 10) == .success)
        #expect(DispatchTime.now() >= deadline)
    }

    /// A child forked while a timer's handler runs on the firing thread, a thread the child
    /// does not have: `cancelAndWait()` there (an owner's deinit, say) returns at once, and
    /// so does the timer's own deinit, which must not wait for that handler.
    @Test(.enabled(if: ProcessInfo.processInfo.environment[forkVariable] != nil), .timeLimit(.minutes(1)))
    func childForkedMidHandlerWaitsForNoHandler() throws {
        let engine = try TimerEngine()
        let timer = SafeDispatchTimer(backend: .engine(engine))
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        #expect(
            timer.schedule(deadline: .now()) { _ in
                entered.signal()
                release.wait()
            })
        try #require(entered.wait(timeout: .now() + 10) == .success)
        let pid = fork()
        if pid == 0 {
            timer.cancelAndWait()
            _exit(timer.state == .idle ? 0 : 10)
        }
        try #require(pid > 0)
        var status: Int32 = 0
        let giveUp = DispatchTime.now() + 10
        while waitpid(pid, &status, WNOHANG) == 0 {
            guard DispatchTime.now() < giveUp else {
                kill(pid, SIGKILL)
                _ = waitpid(pid, &status, 0)
                Issue.record("the child still waited for the handler after 10 s")
                break
            }
            usleep(1_000)
        }
        #expect(status == 0, "child status \(status)")
        // In the parent, the handler is still running, and is waited for.
        let waiter = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            timer.cancelAndWait()
            waiter.signal()
        }
        #expect(waiter.wait(timeout: .now() + .milliseconds(50)) == .timedOut, "the parent did not wait")
        release.signal()
        #expect(waiter.wait(timeout: .now() + 10) == .success)
    }

    /// An `ExpiringValue` in a forked child is the child's copy: touching or invalidating it
    /// reaches nothing of the parent's, whose value still expires on time and whose other
    /// value stays; a value made on the parent's engine is kept but cannot expire by itself,
    /// and one made on the child's fresh shared engine expires.
    @Test(.enabled(if: ProcessInfo.processInfo.environment[forkVariable] != nil), .timeLimit(.minutes(1)))
    func forkedChildKeepsExpiringValuesApart() throws {
        let parentShared = TimerEngine.shared
        let parentExpired = DispatchSemaphore(value: 0)
        let created = DispatchTime.now()
        let expiring = ExpiringValue(1, lifetime: .milliseconds(200)) { _ in parentExpired.signal() }
        let kept = ExpiringValue(2, lifetime: .seconds(60))

        let pid = fork()
        if pid == 0 {
            guard expiring.touch(), kept.invalidate() == 2, kept.value == nil else { _exit(10) }
            let stranded = ExpiringValue(3, lifetime: .zero, backend: .engine(parentShared))
            let expired = Atomic<Bool>(false)
            let fresh = ExpiringValue(4, lifetime: .milliseconds(10)) { _ in expired.store(true, ordering: .releasing) }
            guard fresh.backend.engine === TimerEngine.shared, TimerEngine.shared !== parentShared else { _exit(11) }
            for _ in 0..<10_000 where !expired.load(ordering: .acquiring) { usleep(1_000) }
            guard expired.load(ordering: .acquiring), fresh.value == nil else { _exit(12) }
            // The parent's engine is a dead copy here: a value made on it is expired from
            // the start, as on an engine that was shut down.
            guard stranded.isExpired, stranded.invalidate() == nil else { _exit(13) }
            _exit(0)
        }
        try #require(pid > 0)
        var status: Int32 = 0
        #expect(waitpid(pid, &status, 0) == pid)
        #expect(status & 0x7f == 0 && (status >> 8) & 0xff == 0, "child status \(status)")
        #expect(parentExpired.wait(timeout: .now() + 5) == .success)
        #expect(DispatchTime.now() >= created + .milliseconds(200))
        #expect(expiring.value == nil)
        #expect(kept.value == 2, "the child's invalidate reached the parent's value")
    }

    /// `TimerEngine.shared` made on one thread while another forks: the child, which may
    /// inherit the making half done, still gets a shared engine of its own that fires.
    @Test(
        .needsTheEngine("forks: libdispatch does not run in a forked child"),
        .disabled(if: Self.underThreadSanitizer), .timeLimit(.minutes(3)))
    func sharedEngineMadeWhileForking() throws {
        try expectTestPassesInAProcessOfItsOwn("forkDuringTheSharedEnginesMaking", enabledBy: Self.forkVariable)
    }

    /// Each round forks a child whose shared engine is inherited, so that its next use makes
    /// a new one. A thread of the child uses it while the child's main thread forks a
    /// grandchild 0 to 500 µs later, across the making; the grandchild must get a shared
    /// engine that fires within 5 s, or is killed after 10 s. What the children run is run
    /// here first: the Swift runtime fills its type caches under locks of its own, which a
    /// fork during a first use would leave held in the grandchild.
    @Test(.enabled(if: ProcessInfo.processInfo.environment[forkVariable] != nil), .timeLimit(.minutes(2)))
    func forkDuringTheSharedEnginesMaking() throws {
        try #require(Self.engineFires(SafeDispatchTimer()))
        try PosixThread.spawn { _ = TimerEngine.shared }.join()
        for round in 0..<60 {
            let pid = fork()
            if pid == 0 {
                guard let maker = try? PosixThread.spawn({ _ = TimerEngine.shared }) else { _exit(20) }
                usleep(UInt32(round % 20 * 25))
                let grandchild = fork()
                if grandchild == 0 { _exit(Self.engineFires(SafeDispatchTimer()) ? 0 : 21) }
                maker.join()
                _exit(Self.exitStatus(of: grandchild, killedAfterSeconds: 10) ?? 22)
            }
            try #require(pid > 0)
            let status = Self.exitStatus(of: pid, killedAfterSeconds: 30)
            try #require(
                status == 0,
                "round \(round): child exit status \(status.map(String.init) ?? "none (killed)") (22: the grandchild hung)"
            )
        }
    }

    /// A child's first `TimerEngine.shared`, forked while another thread fills the Swift
    /// runtime's caches of `Optional` and `Atomic` types (as a program's first uses of
    /// types do), does not hang on their locks, which the fork may leave held: the getter
    /// asks the runtime for no type. The child then fires a timer and expires an
    /// `ExpiringValue` on it. All that has run here first on an engine of the parent's;
    /// only the shared engine's getter is new to each child: with no shared engine in the
    /// parent for the first rounds, then with one the parent made once, which the child
    /// finds inherited. (Unoptimized, the inherited engine's deinit, run in that second
    /// half, still looks up `Atomic<Bool>`; see the README's fork section.)
    @Test(
        .needsTheEngine("forks: libdispatch does not run in a forked child"),
        .disabled(if: Self.underThreadSanitizer), .timeLimit(.minutes(3)))
    func firstSharedEngineInAChildForkedWhileTypesAreMade() throws {
        try expectTestPassesInAProcessOfItsOwn("forkWhileTheTypeCacheFills", enabledBy: Self.forkVariable)
    }

    @Test(.enabled(if: ProcessInfo.processInfo.environment[forkVariable] != nil), .timeLimit(.minutes(2)))
    func forkWhileTheTypeCacheFills() throws {
        let engine = try TimerEngine()
        try #require(Self.engineFires(SafeDispatchTimer(backend: .engine(engine))))
        try #require(Self.valueExpires(on: engine))
        engine.syncShutdown()
        // Types are never freed: the filler makes them only around each fork, in bursts,
        // a few hundred kilobytes a round instead of about 150 MB a second.
        let stop = Atomic<Bool>(false)
        let forking = Atomic<Bool>(false)
        let bursts = Atomic<Int>(0)
        let filler = try PosixThread.spawn {
            var path: UInt64 = 1
            while !stop.load(ordering: .relaxed) {
                guard forking.load(ordering: .acquiring) else {
                    usleep(20)
                    continue
                }
                NewTypes.make(16, path: &path)
                bursts.add(1, ordering: .releasing)
            }
        }
        defer {
            stop.store(true, ordering: .relaxed)
            filler.join()
        }
        for round in 0..<60 {
            if round == 30 { _ = TimerEngine.shared }
            forking.store(true, ordering: .releasing)
            let before = bursts.load(ordering: .acquiring)
            while bursts.load(ordering: .acquiring) == before { sched_yield() }
            let pid = fork()
            forking.store(false, ordering: .releasing)
            if pid == 0 {
                guard Self.engineFires(SafeDispatchTimer()) else { _exit(21) }
                _exit(Self.valueExpires(on: .shared) ? 0 : 22)
            }
            try #require(pid > 0)
            let status = Self.exitStatus(of: pid, killedAfterSeconds: 20)
            try #require(status == 0, "round \(round): child exit status \(status.map(String.init) ?? "none (killed)")")
        }
    }

    /// Whether an `ExpiringValue` on `engine` expires within 5 s.
    private static func valueExpires(on engine: TimerEngine) -> Bool {
        let expired = Atomic<Bool>(false)
        let value = ExpiringValue(1, lifetime: .milliseconds(1), backend: .engine(engine)) { _ in
            expired.store(true, ordering: .releasing)
        }
        for _ in 0..<5_000 where !expired.load(ordering: .acquiring) { usleep(1_000) }
        return withExtendedLifetime(value) { expired.load(ordering: .acquiring) }
    }

    /// Whether a one-shot on `timer` fires within 5 s.
    private static func engineFires(_ timer: SafeDispatchTimer) -> Bool {
        let fired = Atomic<Bool>(false)
        guard
            timer.schedule(
                deadline: .now() + .milliseconds(1), handler: { _ in fired.store(true, ordering: .releasing) })
        else { return false }
        for _ in 0..<5_000 where !fired.load(ordering: .acquiring) { usleep(1_000) }
        return fired.load(ordering: .acquiring)
    }

    /// The exit status of child `pid`; `nil` when it was killed by a signal, or by this
    /// function after `seconds`.
    private static func exitStatus(of pid: pid_t, killedAfterSeconds seconds: Int) -> Int32? {
        var status: Int32 = 0
        var waited = 0
        while waitpid(pid, &status, WNOHANG) == 0 {
            guard waited < seconds * 1_000 else {
                kill(pid, SIGKILL)
                waitpid(pid, &status, 0)
                return nil
            }
            usleep(1_000)
            waited += 1
        }
        return status & 0x7f == 0 ? (status >> 8) & 0xff : nil
    }
}

/// Types no one has made before, for the Swift runtime to make.
private enum NewTypes {
    /// Makes `count` nested types along a pseudo-random `path`, each an `Optional` of the
    /// one before (of it, or of it paired with `Int`), and beside each an `Atomic` of a
    /// pointer to it: new types, whose metadata (and conformances) the runtime makes under
    /// its caches' locks, for as long as the paths do not repeat.
    static func make(_ count: Int, path: inout UInt64) {
        self.nest(Int.self, count, &path)
    }

    /// Takes a type's metadata, so that making it is not optimized away.
    @inline(never) private static func keep(_: any ~Copyable.Type) {}

    private static func nest<T>(_: T.Type, _ count: Int, _ path: inout UInt64) {
        guard count > 0 else { return }
        path = path &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        self.keep(Atomic<UnsafeMutablePointer<T>>.self)
        if path >> 63 == 0 {
            self.nest(Optional<T>.self, count - 1, &path)
        } else {
            self.nest(Optional<(T, Int)>.self, count - 1, &path)
        }
    }
}
