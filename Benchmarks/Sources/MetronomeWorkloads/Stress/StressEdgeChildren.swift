internal import CMetronome
@preconcurrency import Dispatch
import Glibc
import Metronome
import MetronomeTestSupport
import Synchronization

/// The bodies of ``StressEdgesSubject``'s faults that may crash or hang a process, each run
/// in a child by ``StressChild``: its exit code says what went wrong.
enum StressEdgeChildren {
    /// Closes every timerfd of the process under a running engine with repeating timers
    /// armed. The engine must stop: a later `start` throws (exit 10 if none did in 5 s),
    /// `shutdown()` returns (or the child is killed for its time), and every handler context
    /// is released (exit 11); a context released twice crashes.
    static func descriptorSweep() -> Int32 {
        guard let engine = try? TimerEngine() else { return 0 }
        let live = StressLiveObjects()
        let timers = self.repeatingTimers(on: engine, live: live)
        self.closeTimerDescriptors()
        let giveUp = MonotonicTime.now() + 5_000_000_000
        var answered = false
        while !answered && MonotonicTime.now() < giveUp {
            do {
                try SafeDispatchTimer(backend: .engine(engine)).start(after: .milliseconds(1)) { _ in }
                usleep(1_000)
            } catch {
                answered = true
            }
        }
        engine.syncShutdown()
        withExtendedLifetime(timers) {}
        guard answered else { return 10 }
        return eventually(timeout: .seconds(5), { live.liveCount == 0 }) ? 0 : 11
    }

    /// Closes every timerfd of the process under a running engine, and a second engine takes
    /// their numbers: the first must refuse its arms rather than move the second's timerfds
    /// (exit 20 if none was refused in 5 s), the second's one-shot due in 100 ms must fire
    /// (exit 21 if not in 5 s), the first's shutdown must leave the second's descriptors
    /// alone, so that the second fires again after it (exit 22), and every context of the
    /// first is released (exit 23).
    static func descriptorReuse() -> Int32 {
        guard let first = try? TimerEngine() else { return 0 }
        let live = StressLiveObjects()
        let timers = self.repeatingTimers(on: first, live: live)
        self.closeTimerDescriptors()
        guard let second = try? TimerEngine() else { return 0 }
        let fired = Atomic<Int>(0)
        let probe = SafeDispatchTimer(backend: .engine(second))
        probe.schedule(deadline: .now() + .milliseconds(100)) { _ in fired.add(1, ordering: .relaxed) }
        let giveUp = MonotonicTime.now() + 5_000_000_000
        var refused = false
        while !refused && MonotonicTime.now() < giveUp {
            do {
                // A new earliest wake-up for the first engine: a settime on its number.
                try SafeDispatchTimer(backend: .engine(first)).start(after: .microseconds(1)) { _ in }
                usleep(1_000)
            } catch {
                refused = true
            }
        }
        guard refused else { return 20 }
        guard eventually(timeout: .seconds(5), { fired.load(ordering: .relaxed) == 1 }) else { return 21 }
        first.syncShutdown()
        withExtendedLifetime(timers) {}
        probe.schedule(deadline: .now()) { _ in fired.add(1, ordering: .relaxed) }
        guard eventually(timeout: .seconds(5), { fired.load(ordering: .relaxed) == 2 }) else { return 22 }
        second.syncShutdown()
        return eventually(timeout: .seconds(5), { live.liveCount == 0 }) ? 0 : 23
    }

    /// Eight timers repeating every millisecond on `engine`, each handler holding a context
    /// that `live` counts.
    private static func repeatingTimers(on engine: TimerEngine, live: StressLiveObjects) -> [SafeDispatchTimer] {
        (0..<8).map { _ in
            let timer = SafeDispatchTimer(backend: .engine(engine))
            let context = StressHandlerContext(token: 0, repeating: true, live: live)
            timer.schedule(deadline: .now() + .milliseconds(1), repeating: .milliseconds(1)) { _ in
                withExtendedLifetime(context) {}
            }
            return timer
        }
    }

    /// Closes each descriptor `/proc/self/fd` names as a timerfd.
    private static func closeTimerDescriptors() {
        guard let directory = opendir("/proc/self/fd") else { return }
        var descriptors: [Int32] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) {
                String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
            }
            guard let descriptor = Int32(name) else { continue }
            var target = [CChar](repeating: 0, count: 64)
            let length = readlink("/proc/self/fd/\(name)", &target, target.count - 1)
            guard length > 0 else { continue }
            if String(decoding: target.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
                == "anon_inode:[timerfd]"
            {
                descriptors.append(descriptor)
            }
        }
        closedir(directory)
        for descriptor in descriptors { close(descriptor) }
    }

    /// Forks from inside a release callback that the engine's stop runs, on the C API (the
    /// Swift layer treats an engine in a forked child as dead before C sees it). The
    /// grandchild stops and destroys the engine it inherited from there, and exits; the
    /// child's stop goes on, and it destroys the engine: neither may crash or hang. Exit 12
    /// when the grandchild did.
    static func forkInRelease() -> Int32 {
        // Freed memory is overwritten (glibc's M_PERTURB), so that a use after free shows
        // without a sanitizer: a destroyed mutex locks no more, a freed pointer points nowhere.
        Self.perturbFreedMemory()
        var config = mtr_engine_config()
        mtr_engine_config_init(&config)
        config.on_fire = { _, _ in }
        config.on_release = { _ in
            // Only the first release forks, once per process.
            guard ReleaseFork.grandchild.load(ordering: .acquiring) == 0 else { return }
            let pid = fork()
            if pid == 0 {
                let engine = OpaquePointer(bitPattern: ReleaseFork.engine.load(ordering: .acquiring))
                mtr_engine_stop(engine!)
                mtr_engine_destroy(engine)
                _exit(0)
            }
            ReleaseFork.grandchild.store(pid, ordering: .releasing)
        }
        var created: OpaquePointer?
        guard mtr_engine_create(&config, &created) == 0, let engine = created else { return 0 }
        ReleaseFork.engine.store(UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(engine))), ordering: .releasing)
        var now: Int64 = 0
        mtr_clock_now(.MTR_CLOCK_MONOTONIC, &now)
        for _ in 0..<4 {
            var timer: mtr_timer_id = 0
            guard mtr_timer_create(engine, nil, &timer) == 0 else { break }
            _ = mtr_timer_arm_once(engine, timer, .MTR_CLOCK_MONOTONIC, now + 60_000_000_000, 0)
        }
        mtr_engine_stop(engine)
        mtr_engine_destroy(engine)
        let pid = ReleaseFork.grandchild.load(ordering: .acquiring)
        guard pid > 0 else { return 0 }  // no process to spare: not the library's fault
        return StressChild.reap(pid) == nil ? 0 : 12
    }

    /// `mallopt(M_PERTURB, 0xA5)`, which SwiftGlibc does not import (`<malloc.h>`).
    private static func perturbFreedMemory() {
        typealias MallOpt = @convention(c) (Int32, Int32) -> Int32
        guard let symbol = dlsym(nil, "mallopt") else { return }
        let perturb: Int32 = -6  // M_PERTURB
        _ = unsafeBitCast(symbol, to: MallOpt.self)(perturb, 0xA5)
    }

    /// What ``forkInRelease()``'s release callback, which captures nothing, shares.
    private enum ReleaseFork {
        static let grandchild = Atomic<Int32>(0)
        /// The engine, by its address.
        static let engine = Atomic<UInt>(0)
    }

    /// Starts `/bin/sleep 30`, by `posix_spawn` or by fork and exec.
    ///
    /// - Returns: The process, or -1 when none could be started.
    static func spawnSleep(byFork: Bool) -> pid_t {
        let arguments: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/sleep"), strdup("30"), nil]
        defer { for argument in arguments { free(argument) } }
        if byFork {
            let pid = fork()
            if pid == 0 {
                execv("/bin/sleep", arguments)
                _exit(127)
            }
            return pid
        }
        var pid: pid_t = 0
        return posix_spawn(&pid, "/bin/sleep", nil, nil, arguments, environ) == 0 ? pid : -1
    }
}
