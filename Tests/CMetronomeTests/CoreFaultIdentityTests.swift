#if Engine
// A fault stays the engine's own: a descriptor number the engine no longer owns is never
// armed, read or closed, however it came to be reused; once a call has reported the fault no
// callback starts; the stop and the destroy survive a pthread_cancel of their caller; and a
// fault with the descriptor table full stops the engine while the process goes on.
//
// In forked children, where no other thread opens descriptors: the tests close them.
import CMetronome
import Glibc
import Synchronization
import Testing

/// What the raw callbacks share with the child; a C callback captures nothing. Every member
/// is touched in the parent before a fork, so the child runs no lazy initializer.
private enum Identity {
    /// Callbacks of timers with context 2 (the probes).
    static let probeFirings = Atomic<Int>(0)
    /// Callbacks of the timer with context 3 (another engine's).
    static let otherFirings = Atomic<Int>(0)
    /// Set by the gate's callback (context 1) once it runs; it returns once `open`.
    static let gateEntered = Atomic<Bool>(false)
    static let open = Atomic<Bool>(false)
    static let releases = Atomic<Int>(0)
    /// The kernel id of the thread that ran the last callback of context 4.
    static let firingThread = Atomic<Int32>(0)
    nonisolated(unsafe) static var engine: OpaquePointer?

    static func touch() {
        _ = probeFirings.load(ordering: .relaxed)
        _ = otherFirings.load(ordering: .relaxed)
        _ = gateEntered.load(ordering: .relaxed)
        _ = open.load(ordering: .relaxed)
        _ = releases.load(ordering: .relaxed)
        _ = firingThread.load(ordering: .relaxed)
        _ = engine
    }

    /// An engine whose callbacks count into the statics by context; without `standby`, a
    /// callback that blocks holds the engine.
    static func makeEngine(shards: UInt32 = 1, standby: Bool = true) -> OpaquePointer? {
        var config = mtr_engine_config()
        mtr_engine_config_init(&config)
        config.shards = shards
        config.no_standby = !standby
        config.on_fire = { context, _ in
            switch Int(bitPattern: context) {
            case 1:
                Identity.gateEntered.store(true, ordering: .sequentiallyConsistent)
                while !Identity.open.load(ordering: .sequentiallyConsistent) { sched_yield() }
            case 2: Identity.probeFirings.add(1, ordering: .sequentiallyConsistent)
            case 3: Identity.otherFirings.add(1, ordering: .sequentiallyConsistent)
            case 4: Identity.firingThread.store(Identity.threadID(), ordering: .sequentiallyConsistent)
            default: break
            }
        }
        config.on_release = { context in
            if context != nil { Identity.releases.add(1, ordering: .sequentiallyConsistent) }
        }
        var engine: OpaquePointer?
        guard mtr_engine_create(&config, &engine) == 0 else { return nil }
        return engine
    }

    static func timer(_ engine: OpaquePointer, context: Int) -> mtr_timer_id? {
        var id: mtr_timer_id = 0
        return mtr_timer_create(engine, UnsafeMutableRawPointer(bitPattern: context), &id) == 0 ? id : nil
    }

    static func faulted(_ engine: OpaquePointer) -> Bool {
        var info = mtr_engine_info()
        mtr_engine_get_info(engine, &info)
        return info.fault != 0
    }

    /// The calling thread's kernel id, by C calls only.
    static func threadID() -> Int32 {
        guard let file = fopen("/proc/thread-self/stat", "r") else { return -1 }
        defer { fclose(file) }
        var line = [CChar](repeating: 0, count: 64)
        guard fgets(&line, Int32(line.count), file) != nil else { return -1 }
        return Int32(atoi(line))
    }

    /// Waits until `engine`'s firing thread sleeps in epoll_wait: a sweep must find it there
    /// for nothing of the engine's to run meanwhile.
    static func firingThreadWaits(_ engine: OpaquePointer) -> Bool {
        firingThread.store(0, ordering: .sequentiallyConsistent)
        guard let marker = timer(engine, context: 4),
            mtr_timer_arm_once(engine, marker, .MTR_CLOCK_MONOTONIC, 0, 0) == 0
        else { return false }
        return eventually(timeout: .nanoseconds(Bounds.patienceNs)) {
            let thread = firingThread.load(ordering: .sequentiallyConsistent)
            guard thread != 0, let file = fopen("/proc/self/task/\(thread)/wchan", "r") else { return false }
            defer { fclose(file) }
            var line = [CChar](repeating: 0, count: 64)
            return fgets(&line, Int32(line.count), file) != nil && strncmp(line, "do_epoll_wait", 13) == 0
        }
    }

    /// An engine `make` creates, and the timerfds on `clock` that it opened.
    static func engine(
        _ make: () -> OpaquePointer?, openingOn clock: clockid_t
    ) -> (engine: OpaquePointer, timerfds: [Int32])? {
        let before = CoreContractTests.Fault.timerfds(onClock: clock)
        guard let engine = make() else { return nil }
        return (engine, CoreContractTests.Fault.timerfds(onClock: clock).filter { !before.contains($0) })
    }

    /// The descriptors open in this process.
    static func openDescriptors() -> Set<Int32> {
        Set((Int32(0)..<1024).filter { fcntl($0, F_GETFD) >= 0 })
    }
}

extension CoreContractTests {
    @Suite(
        .serialized, .tags(.realTime),
        .disabled(if: Bounds.threadSanitized, "TSan does not support threads after a multi-threaded fork"))
    struct FaultIdentity {
        /// A sweep closes every descriptor of engine A, and engine B then gets the same
        /// numbers. A's arm is refused (it must not move B's timerfd an hour on), B's timer
        /// fires, A's destroy returns and leaves B's descriptors open, and B fires again.
        @Test func aNumberReusedByAnotherEngineIsNotTheFirstEngines() {
            Identity.touch()
            let code = exitCodeOfChild(timeoutNs: 3 * Bounds.patienceNs) {
                guard let a = Identity.makeEngine(), let timerA = Identity.timer(a, context: 5),
                    Identity.firingThreadWaits(a)
                else { return 2 }
                let aDescriptors = Identity.openDescriptors()
                closefrom(3)
                guard let b = Identity.makeEngine(), let timerB = Identity.timer(b, context: 3) else { return 2 }
                let bDescriptors = Identity.openDescriptors()
                guard !aDescriptors.isDisjoint(with: bDescriptors) else { return 2 }  // numbers reused
                guard mtr_timer_arm_once(b, timerB, .MTR_CLOCK_MONOTONIC, Time.monotonic() + 100 * Time.ms, 0) == 0
                else { return 2 }
                // An earlier deadline than B's would be a new earliest wake-up for A: its arm
                // moves A's timerfd, which is B's number now.
                let armed = mtr_timer_arm_once(a, timerA, .MTR_CLOCK_MONOTONIC, Time.monotonic() + Time.ms, 0)
                guard armed == ESHUTDOWN, Identity.faulted(a) else { return 3 }
                // Refused too, as stopping (ESHUTDOWN) or, once stopped, as a timer no longer there.
                let later = mtr_timer_arm_once(a, timerA, .MTR_CLOCK_MONOTONIC, Time.monotonic() + 3_600 * Time.s, 0)
                guard later == ESHUTDOWN || later == EINVAL else { return 3 }
                guard
                    eventually(
                        timeout: .nanoseconds(Bounds.patienceNs),
                        { Identity.otherFirings.load(ordering: .relaxed) == 1 })
                else { return 4 }
                mtr_engine_destroy(a)
                guard Identity.openDescriptors().isSuperset(of: bDescriptors) else { return 5 }
                guard mtr_timer_arm_once(b, timerB, .MTR_CLOCK_MONOTONIC, Time.monotonic(), 0) == 0,
                    eventually(
                        timeout: .nanoseconds(Bounds.patienceNs),
                        { Identity.otherFirings.load(ordering: .relaxed) == 2 })
                else { return 6 }
                mtr_engine_destroy(b)
                return 0
            }
            #expect(code == 0)
        }

        /// The wall clock's timerfd is replaced by another's timerfd under the same number while
        /// arms alternate between the monotonic and the wall clock and make no new earliest
        /// wake-up: the engine notices by a check that needs no arm, and refuses them.
        @Test func everyClocksDescriptorIsCheckedWhateverTheArmsAre() {
            Identity.touch()
            let code = exitCodeOfChild(timeoutNs: 3 * Bounds.patienceNs) {
                guard let (engine, mine) = Identity.engine({ Identity.makeEngine() }, openingOn: CLOCK_REALTIME),
                    mine.count == 1, let mono = Identity.timer(engine, context: 5),
                    let wall = Identity.timer(engine, context: 5)
                else { return 2 }
                // Another engine's wall timerfd, under the first engine's number.
                guard let (stranger, strangers) = Identity.engine({ Identity.makeEngine() }, openingOn: CLOCK_REALTIME),
                    strangers.count == 1, dup2(strangers[0], mine[0]) == mine[0]
                else { return 2 }
                let far = Time.monotonic() + 3_600 * Time.s
                let wallFar = Time.now(.MTR_CLOCK_REALTIME) + 3_600 * Time.s
                var step: Int64 = 0
                let refused = eventually(timeout: .nanoseconds(Bounds.patienceNs)) {
                    step += 2
                    let m = mtr_timer_arm_once(engine, mono, .MTR_CLOCK_MONOTONIC, far + step, 0)
                    let w = mtr_timer_arm_once(engine, wall, .MTR_CLOCK_REALTIME, wallFar + step, 0)
                    return m != 0 && w != 0
                }
                guard refused, Identity.faulted(engine) else { return 3 }
                mtr_engine_destroy(engine)
                // The stranger's timerfd is not the engine's to close.
                guard fcntl(mine[0], F_GETFD) >= 0 else { return 4 }
                mtr_engine_destroy(stranger)
                return 0
            }
            #expect(code == 0)
        }

        /// The firing thread is in a callback with more timers of the pass due behind it (no
        /// standby to fire them meanwhile) when an arm on another clock meets that clock's
        /// closed timerfd and reports the fault: none of those starts.
        @Test func noCallbackStartsOnceAnArmReportedTheFault() {
            Identity.touch()
            let code = exitCodeOfChild(timeoutNs: 3 * Bounds.patienceNs) {
                guard
                    let (engine, mine) = Identity.engine(
                        { Identity.makeEngine(standby: false) }, openingOn: CLOCK_BOOTTIME),
                    mine.count == 1, let gate = Identity.timer(engine, context: 1),
                    let late = Identity.timer(engine, context: 2)
                else { return 2 }
                let now = Time.monotonic()
                for _ in 0..<8 {
                    guard let probe = Identity.timer(engine, context: 2),
                        mtr_timer_arm_once(engine, probe, .MTR_CLOCK_MONOTONIC, now + 2 * Time.ms, 0) == 0
                    else { return 2 }
                }
                guard mtr_timer_arm_once(engine, gate, .MTR_CLOCK_MONOTONIC, now + Time.ms, 0) == 0,
                    eventually(
                        timeout: .nanoseconds(Bounds.patienceNs), { Identity.gateEntered.load(ordering: .relaxed) })
                else { return 3 }
                while Time.monotonic() < now + 3 * Time.ms { Time.sleep(Time.ms) }  // the probes are due
                close(mine[0])
                guard mtr_timer_arm_once(engine, late, .MTR_CLOCK_BOOTTIME, 0, 0) == ESHUTDOWN else { return 4 }
                Identity.open.store(true, ordering: .sequentiallyConsistent)
                mtr_engine_destroy(engine)
                return Identity.probeFirings.load(ordering: .sequentiallyConsistent) == 0 ? 0 : 5
            }
            #expect(code == 0)
        }

        /// Two threads cancelled while they wait in `mtr_engine_stop` for a callback to
        /// return, one in the join and one behind it: each cancellation waits for the stop,
        /// which finishes, and the destroy after them returns instead of hanging on a lock
        /// a dead thread held.
        @Test func aStopperCancelledWhileItWaitsLeavesNothingHeld() {
            Identity.touch()
            let code = exitCodeOfChild(timeoutNs: 3 * Bounds.patienceNs) {
                guard let engine = Identity.makeEngine(), let gate = Identity.timer(engine, context: 1),
                    mtr_timer_arm_once(engine, gate, .MTR_CLOCK_MONOTONIC, 0, 0) == 0,
                    eventually(
                        timeout: .nanoseconds(Bounds.patienceNs), { Identity.gateEntered.load(ordering: .relaxed) })
                else { return 2 }
                Identity.engine = engine
                var stoppers = [pthread_t(), pthread_t()]
                for index in stoppers.indices {
                    let started = pthread_create(
                        &stoppers[index], nil,
                        { _ in
                            mtr_engine_stop(Identity.engine!)
                            return nil
                        }, nil)
                    guard started == 0 else { return 2 }
                }
                guard eventually(timeout: .nanoseconds(Bounds.patienceNs), { mtr_engine_was_stopped(engine) == 1 })
                else { return 3 }
                Time.sleep(20 * Time.ms)  // into their waits for the callback
                for stopper in stoppers { pthread_cancel(stopper) }
                Identity.open.store(true, ordering: .sequentiallyConsistent)
                for stopper in stoppers { pthread_join(stopper, nil) }
                mtr_engine_destroy(engine)
                return Identity.releases.load(ordering: .sequentiallyConsistent) == 1 ? 0 : 4
            }
            #expect(code == 0)
        }

        /// Every descriptor swept and every number then taken by files of the program, so that
        /// no descriptor is left: the engine meets the fault, stops and is destroyed, the
        /// process goes on, and the program's files stay open.
        @Test func aFaultWithTheDescriptorTableFullStopsTheEngineOnly() {
            Identity.touch()
            let code = exitCodeOfChild(timeoutNs: 3 * Bounds.patienceNs) {
                guard let engine = Identity.makeEngine(), let timer = Identity.timer(engine, context: 5) else {
                    return 2
                }
                var limit = rlimit(rlim_cur: 64, rlim_max: 64)
                guard setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 2 }
                closefrom(3)
                var files: [Int32] = []
                files.reserveCapacity(64)
                while true {
                    let fd = open("/dev/null", O_RDONLY)
                    if fd < 0 { break }
                    files.append(fd)
                }
                let armed = mtr_timer_arm_once(engine, timer, .MTR_CLOCK_MONOTONIC, 0, 0)
                guard armed == ESHUTDOWN else { return 3 }
                mtr_engine_destroy(engine)
                guard files.allSatisfy({ fcntl($0, F_GETFD) >= 0 }) else { return 4 }
                return Identity.releases.load(ordering: .sequentiallyConsistent) == 1 ? 0 : 5
            }
            #expect(code == 0)
        }
    }
}
#endif
