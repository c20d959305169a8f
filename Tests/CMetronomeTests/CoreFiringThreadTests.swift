#if Engine
// What a firing thread is and what it may do: engines whose callbacks stop, destroy or wait
// for each other; a new thread that the system gives a dead firing thread's identity; the
// signals a firing thread takes.
import CMetronome
import Glibc
import Synchronization
import Testing

extension CoreContractTests {
    @Suite(.serialized, .tags(.realTime))
    struct FiringThread {
        /// What one engine's callback does to the other engine.
        enum Call: Sendable {
            case stop
            case destroy
            case cancelSync
        }

        /// Each engine's callback, and the other engine's timer, once both exist.
        final class Peer: @unchecked Sendable {
            let engine: Engine
            /// Written before either timer is armed.
            var probe: Probe?
            init(_ engine: Engine) { self.engine = engine }

            func perform(_ call: Call) {
                switch call {
                case .stop: mtr_engine_stop(engine.handle)
                case .destroy: mtr_engine_destroy(engine.handle)
                case .cancelSync: _ = probe?.cancelSync()
                }
            }
        }

        /// Two engines' callbacks run at once, and each stops, destroys or waits in
        /// cancel_sync for the other engine's running callback. Every call returns (a firing
        /// thread never waits for another), both callbacks end, and every context is
        /// released once.
        @Test(
            arguments: [
                (Call.destroy, Call.destroy), (.stop, .stop), (.cancelSync, .cancelSync),
                (.destroy, .cancelSync), (.stop, .destroy),
            ])
        func callbacksOfTwoEnginesCallEachOtherAndReturn(_ first: Call, _ second: Call) throws {
            let a = Peer(try Engine())
            let b = Peer(try Engine())
            struct Progress {
                var running: Set<Int> = []
                var returned: Set<Int> = []
            }
            let progress = Monitor(Progress())
            func timer(on mine: Peer, calling call: Call, on other: Peer, tag: Int) throws -> Probe {
                // Weak: a peer's engine holds its probes, and a probe holds its action.
                try mine.engine.makeTimer { [weak other] _ in
                    progress.update { _ = $0.running.insert(tag) }
                    // Both callbacks run before either calls the other engine.
                    guard progress.wait(until: { $0.running.count == 2 }) else { return }
                    other?.perform(call)
                    progress.update { _ = $0.returned.insert(tag) }
                }
            }
            a.probe = try timer(on: a, calling: first, on: b, tag: 0)
            b.probe = try timer(on: b, calling: second, on: a, tag: 1)
            if first == .destroy { b.engine.markDestroyed() }
            if second == .destroy { a.engine.markDestroyed() }
            let deadline = Time.monotonic() + 10 * Time.ms
            try #require(a.probe?.armOnce(at: deadline) == 0)
            try #require(b.probe?.armOnce(at: deadline) == 0)

            #expect(progress.wait { $0.returned.count == 2 }, "the callbacks deadlocked")
            a.engine.destroy()
            b.engine.destroy()
            #expect(a.engine.waitAllReleased() && b.engine.waitAllReleased())
            a.engine.expectAllReleasedOnce()
            b.engine.expectAllReleasedOnce()
        }

        /// glibc gives a dead thread's cached stack, and with it its `pthread_t`, to the next
        /// thread created. Such a thread destroys an engine stopped before: it is not taken
        /// for the engine's firing thread, so the engine is freed with its descriptors. In a
        /// forked child, where no other thread opens descriptors or takes the stack.
        @Test(
            .disabled(if: Bounds.threadSanitized, "TSan does not support threads after a multi-threaded fork"))
        func aThreadWithADeadFiringThreadsIdentityDestroysTheEngine() {
            _ = Self.firingThread  // made here: the child runs no lazy initializer
            let code = exitCodeOfChild {
                let before = Self.openDescriptors()
                guard let engine = Self.engineRecordingItsThread(), Self.firingThread.wait() else { return 2 }
                mtr_engine_stop(engine)
                var thread = pthread_t()
                let destroyer: @convention(c) (UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? = { engine in
                    let sameIdentity = pthread_equal(pthread_self(), FiringThread.firingThread.value) != 0
                    mtr_engine_destroy(OpaquePointer(engine))
                    return sameIdentity ? UnsafeMutableRawPointer(bitPattern: 1) : nil
                }
                guard pthread_create(&thread, nil, destroyer, UnsafeMutableRawPointer(engine)) == 0 else { return 2 }
                var result: UnsafeMutableRawPointer?
                pthread_join(thread, &result)
                guard result != nil else { return Self.identityNotReused }
                return Self.openDescriptors() == before ? 0 : 1
            }
            guard code != Self.identityNotReused else {
                // Nothing to show where the system made the thread a new identity.
                print("the new thread did not take the firing thread's identity")
                return
            }
            #expect(code == 0, "the engine's descriptors leaked")
        }

        /// Every signal that can be blocked is blocked on a firing thread, so process signal
        /// handlers never run inside the firing loop.
        @Test
        func theFiringThreadBlocksSignals() throws {
            let engine = try Engine()
            let blocked = Monitor<[Int32: Bool]>([:])
            let probe = try engine.makeTimer { _ in
                var mask = sigset_t()
                pthread_sigmask(SIG_BLOCK, nil, &mask)
                blocked.update { seen in
                    for signal in [SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM, SIGCHLD, SIGPIPE, SIGHUP] {
                        seen[signal] = sigismember(&mask, signal) == 1
                    }
                }
            }
            try #require(probe.armOnce(at: Time.monotonic()) == 0)
            try #require(blocked.wait { !$0.isEmpty })
            #expect(blocked.read { $0.filter { !$0.value }.keys.sorted() } == [])
            engine.destroy()
        }

        // MARK: - Helpers of the identity test, for its forked child (C calls only)

        static let identityNotReused = Int32(10)

        /// The firing thread's `pthread_t`, recorded from inside its callback.
        final class RecordedThread: @unchecked Sendable {
            private let recorded = Atomic<Bool>(false)
            private(set) var value = pthread_t()

            func record() {
                value = pthread_self()
                recorded.store(true, ordering: .releasing)
            }

            /// Polls until recorded; false after `Bounds.patienceNs`.
            func wait() -> Bool {
                eventually(timeout: .nanoseconds(Bounds.patienceNs)) { recorded.load(ordering: .acquiring) }
            }
        }

        static let firingThread = RecordedThread()

        /// An engine with one timer, due at once, whose callback records its thread.
        static func engineRecordingItsThread() -> OpaquePointer? {
            var config = mtr_engine_config()
            mtr_engine_config_init(&config)
            config.on_fire = { _, _ in FiringThread.firingThread.record() }
            var engine: OpaquePointer?
            var id: mtr_timer_id = 0
            guard mtr_engine_create(&config, &engine) == 0, let engine,
                mtr_timer_create(engine, nil, &id) == 0,
                mtr_timer_arm_once(engine, id, .MTR_CLOCK_MONOTONIC, 0, 0) == 0
            else { return nil }
            return engine
        }

        /// How many descriptors the process has open.
        static func openDescriptors() -> Int {
            guard let directory = opendir("/proc/self/fd") else { return -1 }
            defer { closedir(directory) }
            var count = 0
            while readdir(directory) != nil { count += 1 }
            return count
        }
    }
}
#endif
