#if Engine
// What a firing thread is and what it may do: engines whose callbacks stop, destroy or wait
// for each other, and a destroy that cannot wait; a new thread that the system gives a dead
// firing thread's identity; the signals a firing thread takes, and those of the processes a
// callback starts.
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

        /// A destroy from another engine's callback cannot wait for this engine's running
        /// callback, and says so: it returns `EINPROGRESS` while that callback still runs, and
        /// the callback's context is released only after it returned. A destroy that could
        /// wait returns 0 with every context released.
        @Test func aDestroyThatCannotWaitSaysSo() throws {
            let a = try Engine()
            let b = try Engine()
            struct Progress {
                var bRunning = false
                var bMayReturn = false
                var destroyed: Int32?
            }
            let progress = Monitor(Progress())
            let bProbe = try b.makeTimer { _ in
                progress.update { $0.bRunning = true }
                progress.wait { $0.bMayReturn }
            }
            let aProbe = try a.makeTimer { [other = b.ref] _ in
                guard progress.wait(until: { $0.bRunning }) else { return }
                let rc = mtr_engine_destroy(other.handle)
                progress.update { $0.destroyed = rc }
            }
            b.markDestroyed()
            try #require(bProbe.armOnce(at: Time.monotonic()) == 0)
            try #require(aProbe.armOnce(at: Time.monotonic()) == 0)

            try #require(progress.wait { $0.destroyed != nil })
            #expect(progress.read { $0.destroyed } == EINPROGRESS)
            #expect(bProbe.releases.load(ordering: .acquiring) == 0, "released under its running callback")
            progress.update { $0.bMayReturn = true }
            #expect(b.waitAllReleased())
            b.expectAllReleasedOnce()

            a.markDestroyed()
            #expect(mtr_engine_destroy(a.handle) == 0)
            #expect(aProbe.releases.load(ordering: .acquiring) == 1)
        }

        /// The signals a firing thread takes: none while it waits, so process signal handlers
        /// never run inside the firing loop; and in a callback those of the thread that created
        /// the engine, which a process the callback starts inherits.
        @Test
        func theFiringThreadBlocksSignalsWhileItWaitsAndNotInCallbacks() throws {
            let signals = Self.signals
            let engine = try Self.engineOfAThreadThatTakesSignals()
            let seen = Monitor<(thread: pid_t, blocked: [Int32])?>(nil)
            let probe = try engine.makeTimer { _ in
                var mask = sigset_t()
                pthread_sigmask(SIG_BLOCK, nil, &mask)
                seen.update { $0 = (KernelThread.currentID(), signals.filter { sigismember(&mask, $0) == 1 }) }
            }
            try #require(probe.armOnce(at: Time.monotonic()) == 0)
            try #require(seen.wait { $0 != nil })
            let (thread, inCallback) = seen.read { $0! }
            #expect(inCallback == [])
            #expect(
                eventually(timeout: .nanoseconds(Bounds.patienceNs)) {
                    signals.allSatisfy { Self.blocks(thread: thread, $0) }
                }, "the waiting firing thread takes signals")
            engine.destroy()
        }

        /// A process started from a callback, by each way of starting one, stops on SIGTERM:
        /// a shell that sends itself SIGTERM dies of it, where a process started with every
        /// signal blocked would run on and exit 3.
        @Test(
            .disabled(if: Bounds.threadSanitized, "TSan does not support a fork in a multi-threaded process"),
            arguments: [Starter.forkAndExec, .posixSpawn, .system])
        func aProcessStartedFromACallbackStopsOnSIGTERM(_ starter: Starter) throws {
            let engine = try Self.engineOfAThreadThatTakesSignals()
            let status = Monitor<Int32?>(nil)
            let probe = try engine.makeTimer { _ in
                let ended = starter.run("kill -TERM $$; exit 3")
                status.update { $0 = ended }
            }
            try #require(probe.armOnce(at: Time.monotonic()) == 0)
            try #require(status.wait { $0 != nil })
            let ended = status.read { $0! }
            #expect(ended & 0x7f == SIGTERM, "the shell ended with wait status \(ended)")
            engine.destroy()
        }

        static let signals = [SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM, SIGCHLD, SIGPIPE, SIGHUP]

        /// An engine created by a thread that blocks none of `signals` (the test's own thread
        /// may block some).
        static func engineOfAThreadThatTakesSignals() throws -> Engine {
            let made = Monitor<Result<Engine, any Error>?>(nil)
            try PosixThread.spawn {
                var unblocked = sigset_t()
                sigemptyset(&unblocked)
                for signal in Self.signals { sigaddset(&unblocked, signal) }
                pthread_sigmask(SIG_UNBLOCK, &unblocked, nil)
                let engine = Result { try Engine() }
                made.update { $0 = engine }
            }.join()
            return try made.read { $0! }.get()
        }

        /// The ways a callback may start a process.
        enum Starter: Sendable {
            case forkAndExec
            case posixSpawn
            case system

            /// Runs `/bin/sh -c script` to its end; its wait status, or -1.
            func run(_ script: String) -> Int32 {
                if self == .system { return Glibc.system(script) }
                let argv: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/sh"), strdup("-c"), strdup(script), nil]
                defer { argv.forEach { free($0) } }
                var pid: pid_t = -1
                argv.withUnsafeBufferPointer { argv in
                    guard let arguments = argv.baseAddress, let shell = argv[0] else { return }
                    if self == .posixSpawn {
                        if posix_spawn(&pid, shell, nil, nil, arguments, environ) != 0 { pid = -1 }
                        return
                    }
                    // Between fork and exec the child calls nothing but exec and _exit.
                    pid = fork()
                    if pid == 0 {
                        execv(shell, arguments)
                        _exit(127)
                    }
                }
                var status: Int32 = 0
                guard pid > 0, waitpid(pid, &status, 0) == pid else { return -1 }
                return status
            }
        }

        /// Whether the thread `thread` of this process blocks `signal`, by its `/proc` entry.
        static func blocks(thread: pid_t, _ signal: Int32) -> Bool {
            guard let file = fopen("/proc/self/task/\(thread)/status", "r") else { return false }
            defer { fclose(file) }
            var line = [CChar](repeating: 0, count: 256)
            while fgets(&line, Int32(line.count), file) != nil {
                let text = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                guard text.hasPrefix("SigBlk:"),
                    let mask = UInt64(String(text.dropFirst(7).filter { !$0.isWhitespace }), radix: 16)
                else { continue }
                return mask & (1 << UInt64(signal - 1)) != 0
            }
            return false
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
