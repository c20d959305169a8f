#if Engine
// A fork inside a callback: the child's only thread is a copy of the firing thread, still in
// that callback. The child's engines are dead from the instant of the fork: when the callback
// returns there, the copy touches none of the descriptors it shares with the parent, and a
// stop or destroy made from the callback in the child leaves the running callback's context
// alone until the callback has returned.
//
// These tests use raw C callbacks, not the `Probe` fixture: in the child only the copy of the
// firing thread exists, so the callback may make C calls and atomic operations only (a lock
// another thread held at the fork stays held there).
import CMetronome
import Glibc
import Synchronization
import Testing

/// What the raw callbacks share; a C callback captures nothing. Every member is touched in the
/// parent before a fork, so the child never runs a lazy initializer.
private enum Forking {
    /// The timers' contexts, as small integers.
    static let forkingTimer = 1
    static let laterTimer = 2
    static let farTimer = 3
    /// Blocks the firing thread until `unblock`, so that the standby runs what is due.
    static let blockingTimer = 4
    static let unblock = Atomic<Bool>(false)

    /// What the child does inside the callback that forked, before it returns.
    enum ChildAction: Int {
        /// Sleeps, so that the parent arms a new earliest timer before the copy returns.
        case sleep
        case stop
        case destroy
    }

    nonisolated(unsafe) static var engine: OpaquePointer?
    static let parentPID = Atomic<Int32>(0)
    static let childPID = Atomic<Int32>(0)
    static let action = Atomic<Int>(0)
    static let laterFirings = Atomic<Int>(0)
    /// Set in the child while its copy of the callback runs.
    static let childInCallback = Atomic<Bool>(false)
    static let childReleases = Atomic<Int>(0)

    /// Exit codes of the child.
    static let released = Int32(0)
    static let notInherited = Int32(3)
    static let releasedUnderItsCallback = Int32(4)

    static func reset(_ engine: OpaquePointer, action: ChildAction) {
        self.engine = engine
        parentPID.store(getpid(), ordering: .relaxed)
        childPID.store(0, ordering: .relaxed)
        self.action.store(action.rawValue, ordering: .relaxed)
        laterFirings.store(0, ordering: .relaxed)
        unblock.store(false, ordering: .relaxed)
        childInCallback.store(false, ordering: .relaxed)
        childReleases.store(0, ordering: .relaxed)
    }

    static func makeEngine(shards: UInt32) throws -> OpaquePointer {
        var config = mtr_engine_config()
        mtr_engine_config_init(&config)
        config.shards = shards
        config.on_fire = { context, _ in
            switch Int(bitPattern: context) {
            case Forking.forkingTimer:
                let pid = fork()
                if pid == 0 {
                    Forking.runInChild()
                } else {
                    Forking.childPID.store(pid, ordering: .releasing)
                }
            case Forking.laterTimer:
                Forking.laterFirings.add(1, ordering: .releasing)
            case Forking.blockingTimer:
                while !Forking.unblock.load(ordering: .acquiring) { usleep(1_000) }
            default:
                break
            }
        }
        config.on_release = { context in
            // In the parent the releases are the destroy's, at the test's end.
            guard getpid() != Forking.parentPID.load(ordering: .relaxed) else { return }
            if Int(bitPattern: context) == Forking.forkingTimer,
                Forking.childInCallback.load(ordering: .acquiring)
            {
                _exit(Forking.releasedUnderItsCallback)
            }
            // The child holds the forking and the far timer (and perhaps the blocking one):
            // the forking one and one more released, it is done.
            if Forking.childReleases.add(1, ordering: .relaxed).newValue == 2 {
                _exit(Forking.released)
            }
        }
        var engine: OpaquePointer?
        let rc = mtr_engine_create(&config, &engine)
        guard rc == 0, let engine else { throw CoreError(call: "mtr_engine_create", code: rc) }
        return engine
    }

    /// The child's part of the callback that forked; the copy of the firing thread then
    /// returns into the engine.
    static func runInChild() {
        childInCallback.store(true, ordering: .releasing)
        guard let engine, mtr_engine_is_inherited(engine) == 1 else { _exit(notInherited) }
        switch ChildAction(rawValue: action.load(ordering: .relaxed)) {
        case .sleep:
            var pause = timespec(tv_sec: 0, tv_nsec: 300_000_000)
            var left = timespec()
            while nanosleep(&pause, &left) != 0 { pause = left }
        case .stop:
            mtr_engine_stop(engine)
        case .destroy:
            mtr_engine_destroy(engine)
        case nil:
            break
        }
        childInCallback.store(false, ordering: .releasing)
    }

    static func makeTimer(_ engine: OpaquePointer, context: Int, at deadline: Int64) throws {
        var id: mtr_timer_id = 0
        let created = mtr_timer_create(engine, UnsafeMutableRawPointer(bitPattern: context), &id)
        guard created == 0 else { throw CoreError(call: "mtr_timer_create", code: created) }
        let armed = mtr_timer_arm_once(engine, id, .MTR_CLOCK_MONOTONIC, deadline, 0)
        guard armed == 0 else { throw CoreError(call: "mtr_timer_arm_once", code: armed) }
    }

    /// Waits until `condition` holds, at most `Bounds.patienceNs`.
    static func eventually(_ condition: () -> Bool) -> Bool {
        MetronomeTestSupport.eventually(timeout: .nanoseconds(Bounds.patienceNs), condition)
    }

    /// The exit code of the forked child, or nil if it was killed or did not finish.
    static func exitCode(of pid: Int32) -> Int32? {
        var status: Int32 = 0
        guard eventually({ waitpid(pid, &status, WNOHANG) != 0 }) else {
            kill(pid, SIGKILL)
            waitpid(pid, &status, 0)
            return nil
        }
        return status & 0x7f == 0 ? (status >> 8) & 0xff : nil
    }
}

extension CoreContractTests {
    @Suite(
        .serialized, .tags(.realTime),
        .disabled(if: Bounds.threadSanitized, "TSan does not support threads after a multi-threaded fork"))
    struct ForkInCallback {
        /// The child's copy of the firing thread returns from the callback while the parent
        /// has armed a new earliest timer: the copy re-arms nothing, so the parent's timer
        /// fires. (Re-arming the shared timerfd for the child's own earliest timer, an hour
        /// away, would leave the parent's asleep.)
        @Test(arguments: [UInt32(1), 2])
        func aChildBackFromTheCallbackLeavesTheParentsTimerfdAlone(shards: UInt32) throws {
            let engine = try Forking.makeEngine(shards: shards)
            defer { mtr_engine_destroy(engine) }
            Forking.reset(engine, action: .sleep)
            let now = Time.monotonic()
            try Forking.makeTimer(engine, context: Forking.farTimer, at: now + 3_600 * Time.s)
            try Forking.makeTimer(engine, context: Forking.forkingTimer, at: now + 20 * Time.ms)

            try #require(Forking.eventually { Forking.childPID.load(ordering: .acquiring) != 0 })
            let child = Forking.childPID.load(ordering: .acquiring)
            // Due after the child's copy returns from its 300 ms in the callback.
            try Forking.makeTimer(engine, context: Forking.laterTimer, at: Time.monotonic() + 600 * Time.ms)

            #expect(
                Forking.eventually { Forking.laterFirings.load(ordering: .acquiring) == 1 },
                "the parent's timer did not fire: its timerfd was moved")
            #expect(Forking.exitCode(of: child) == Forking.released)
        }

        /// The child stops or destroys the engine it inherited from inside the callback that
        /// forked: the call returns at once, and the copy of the firing thread releases every
        /// context after the callback has returned, the running one's included. (Releasing
        /// it under the callback, or freeing the engine under the copy, would break both.)
        @Test(arguments: [Forking.ChildAction.stop, .destroy], [UInt32(1), 2])
        fileprivate func stopOrDestroyInTheChildsCallbackWaitsForItsReturn(
            action: Forking.ChildAction, shards: UInt32
        ) throws {
            let engine = try Forking.makeEngine(shards: shards)
            defer { mtr_engine_destroy(engine) }
            Forking.reset(engine, action: action)
            let now = Time.monotonic()
            try Forking.makeTimer(engine, context: Forking.farTimer, at: now + 3_600 * Time.s)
            try Forking.makeTimer(engine, context: Forking.forkingTimer, at: now + 20 * Time.ms)

            try #require(Forking.eventually { Forking.childPID.load(ordering: .acquiring) != 0 })
            #expect(Forking.exitCode(of: Forking.childPID.load(ordering: .acquiring)) == Forking.released)
        }

        /// The same with the forking callback run by the standby, while a callback blocks the
        /// firing thread: the child's only thread is then a copy of the standby, which ends the
        /// engine as a copy of the firing thread would.
        @Test(arguments: [Forking.ChildAction.stop, .destroy])
        fileprivate func stopOrDestroyInAStandbysCallbackWaitsForItsReturn(action: Forking.ChildAction) throws {
            let engine = try Forking.makeEngine(shards: 1)
            defer { mtr_engine_destroy(engine) }
            Forking.reset(engine, action: action)
            defer { Forking.unblock.store(true, ordering: .releasing) }
            let now = Time.monotonic()
            try Forking.makeTimer(engine, context: Forking.farTimer, at: now + 3_600 * Time.s)
            try Forking.makeTimer(engine, context: Forking.blockingTimer, at: now)
            try Forking.makeTimer(engine, context: Forking.forkingTimer, at: now + 20 * Time.ms)

            try #require(Forking.eventually { Forking.childPID.load(ordering: .acquiring) != 0 })
            #expect(Forking.exitCode(of: Forking.childPID.load(ordering: .acquiring)) == Forking.released)
            var counters = mtr_counters()
            mtr_engine_get_counters(engine, &counters)
            #expect(counters.takeovers >= 1, "the firing thread ran the forking callback")
        }
    }
}
#endif
