#if Engine
// The stop a descriptor fault makes: it happens whatever descriptors are gone, even every
// one the engine opened, and it is a stop to every reader: the releases it makes see the
// engine stopped, and the arm that met the fault returns it.
//
// In forked children, where no other thread opens descriptors: the tests close them.
import CMetronome
import Glibc
import Synchronization
import Testing

/// What the raw callbacks share with the child; a C callback captures nothing. Every member
/// is touched in the parent before a fork, so the child runs no lazy initializer.
private enum FaultStopping {
    nonisolated(unsafe) static var engine: OpaquePointer?
    static let releases = Atomic<Int>(0)
    /// Releases that found `mtr_engine_was_stopped` true.
    static let releasesOfAStop = Atomic<Int>(0)
    /// The firing thread's kernel id, recorded by a callback.
    static let firingThread = Atomic<Int32>(0)

    static func touch() {
        _ = releases.load(ordering: .relaxed)
        _ = releasesOfAStop.load(ordering: .relaxed)
        _ = firingThread.load(ordering: .relaxed)
        _ = engine
    }

    /// An engine whose one timer, context 1, is armed an hour ahead.
    static func makeEngine(shards: UInt32) -> (OpaquePointer, mtr_timer_id)? {
        var config = mtr_engine_config()
        mtr_engine_config_init(&config)
        config.shards = shards
        config.on_fire = { _, _ in
            let thread = FaultStopping.firstNumber(in: "/proc/thread-self/stat")
            FaultStopping.firingThread.store(thread, ordering: .releasing)
        }
        // releasesOfAStop first: a reader that sees a release counted sees its verdict.
        config.on_release = { context in
            guard context != nil else { return }
            if let engine = FaultStopping.engine, mtr_engine_was_stopped(engine) == 1 {
                FaultStopping.releasesOfAStop.add(1, ordering: .sequentiallyConsistent)
            }
            FaultStopping.releases.add(1, ordering: .sequentiallyConsistent)
        }
        var engine: OpaquePointer?
        var id: mtr_timer_id = 0
        guard mtr_engine_create(&config, &engine) == 0, let engine,
            mtr_timer_create(engine, UnsafeMutableRawPointer(bitPattern: 1), &id) == 0,
            mtr_timer_arm_once(engine, id, .MTR_CLOCK_MONOTONIC, Time.monotonic() + 3_600 * Time.s, 0) == 0
        else { return nil }
        self.engine = engine
        return (engine, id)
    }

    /// Waits until the firing thread sleeps in epoll_wait, after a callback of a timer
    /// without context: what a sweep must find for nothing to wake the thread.
    static func firingThreadWaits(_ engine: OpaquePointer) -> Bool {
        var id: mtr_timer_id = 0
        guard mtr_timer_create(engine, nil, &id) == 0,
            mtr_timer_arm_once(engine, id, .MTR_CLOCK_MONOTONIC, 0, 0) == 0
        else { return false }
        return eventually(timeout: .nanoseconds(Bounds.patienceNs)) {
            let thread = firingThread.load(ordering: .acquiring)
            return thread != 0 && text(of: "/proc/self/task/\(thread)/wchan").hasPrefix("do_epoll_wait")
        }
    }

    /// The first line of a small `/proc` file, by C calls only (the child may not take the
    /// Swift runtime's locks).
    static func text(of path: String) -> String {
        guard let file = fopen(path, "r") else { return "" }
        defer { fclose(file) }
        var line = [CChar](repeating: 0, count: 128)
        guard fgets(&line, Int32(line.count), file) != nil else { return "" }
        return String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    static func firstNumber(in path: String) -> Int32 {
        Int32(text(of: path).prefix { $0 != " " }) ?? -1
    }

    /// Whether the engine stopped itself: its fault recorded, creates refused, the context
    /// released once.
    static func stoppedItself(_ engine: OpaquePointer) -> Bool {
        eventually(timeout: .nanoseconds(Bounds.patienceNs)) {
            var info = mtr_engine_info()
            mtr_engine_get_info(engine, &info)
            var other: mtr_timer_id = 0
            return info.fault != 0 && mtr_timer_create(engine, nil, &other) == ESHUTDOWN
                && releases.load(ordering: .sequentiallyConsistent) == 1
        }
    }
}

extension CoreContractTests {
    @Suite(
        .serialized, .tags(.realTime),
        .disabled(if: Bounds.threadSanitized, "TSan does not support threads after a multi-threaded fork"))
    struct FaultStop {
        /// What meets the closed descriptors first.
        enum FirstCall: Sendable {
            /// An arm, whose timerfd_settime fails: the engine must stop itself.
            case arm
            /// The destroy, whose wake-up of the firing thread fails.
            case destroy
            /// Arms that make no new earliest wake-up, so that no settime meets the closed
            /// timerfd: the engine must still notice, by a check that needs no arm.
            case laterArms
        }

        /// Every descriptor the engine opened is closed under it (a closefrom sweep): the
        /// timerfds, the epoll instance and libevent's pipe. The firing thread sleeps on an
        /// interest set the kernel has emptied; still the engine stops, destroy returns, and
        /// the context is released once.
        @Test(arguments: [FirstCall.arm, .destroy, .laterArms], [UInt32(1), 2])
        func anEngineWhoseDescriptorsAreAllClosedStillStops(first: FirstCall, shards: UInt32) {
            FaultStopping.touch()
            let code = exitCodeOfChild(timeoutNs: 3 * Bounds.patienceNs) {
                guard let (engine, id) = FaultStopping.makeEngine(shards: shards),
                    FaultStopping.firingThreadWaits(engine)
                else { return 2 }
                closefrom(3)
                if first == .arm {
                    _ = mtr_timer_arm_once(engine, id, .MTR_CLOCK_MONOTONIC, Time.monotonic() + Time.ms, 0)
                    guard FaultStopping.stoppedItself(engine) else { return 3 }
                }
                if first == .laterArms {
                    // Each later than the one before, so none moves the timerfd.
                    let base = Time.monotonic() + 2 * 3_600 * Time.s
                    var step: Int64 = 0
                    let refused = eventually(timeout: .nanoseconds(Bounds.patienceNs)) {
                        step += 1
                        return mtr_timer_arm_once(engine, id, .MTR_CLOCK_MONOTONIC, base + step, 0) != 0
                    }
                    guard refused, FaultStopping.stoppedItself(engine) else { return 5 }
                }
                mtr_engine_destroy(engine)
                return FaultStopping.releases.load(ordering: .relaxed) == 1 ? 0 : 4
            }
            #expect(code == 0)
        }

        /// One timerfd closed under the engine, then an arm on its clock: the arm returns
        /// ESHUTDOWN, as every call on a stopping engine does, and the release the fault stop
        /// makes sees the engine stopped, as the Swift layer's `hasStopped` reads it.
        @Test func theFaultStopIsAStopToTheArmAndToTheReleases() {
            FaultStopping.touch()
            let code = exitCodeOfChild(timeoutNs: 3 * Bounds.patienceNs) {
                let before = Fault.timerfds(onClock: CLOCK_MONOTONIC)
                guard let (engine, id) = FaultStopping.makeEngine(shards: 1) else { return 2 }
                let mine = Fault.timerfds(onClock: CLOCK_MONOTONIC).filter { !before.contains($0) }
                // The engine's monotonic timerfd, and its standby's alarm.
                guard !mine.isEmpty else { return 2 }
                for fd in mine { close(fd) }
                let armed = mtr_timer_arm_once(engine, id, .MTR_CLOCK_MONOTONIC, Time.monotonic(), 0)
                guard FaultStopping.stoppedItself(engine) else { return 3 }
                guard armed == ESHUTDOWN else { return 4 }
                guard FaultStopping.releasesOfAStop.load(ordering: .sequentiallyConsistent) == 1 else { return 5 }
                mtr_engine_destroy(engine)
                return 0
            }
            #expect(code == 0)
        }
    }
}
#endif
