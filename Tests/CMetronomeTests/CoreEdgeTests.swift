#if Engine
// An engine's stop and destroy racing the other threads that use it and its own
// callbacks, against the C core: every call answers, and every context is released once.
import CMetronome
import Glibc
import Synchronization
import Testing

extension CoreContractTests {
    @Suite(.serialized, .tags(.realTime))
    struct Edges {
        enum Operation: String, CaseIterable, Sendable {
            case cancel, cancelSync, rearm, move, destroy
        }

        /// SCHED_IDLE, which Glibc's Swift overlay does not name: the thread runs only when
        /// its CPU has nothing else to run.
        static let schedIdle: Int32 = 5

        /// What an operation may answer while the engine stops under it.
        static let answersDuringStop: Set<Int32> = [0, EINVAL, ESHUTDOWN]

        static func run(_ operation: Operation, on probe: Probe, at deadline: Int64) -> Int32 {
            switch operation {
            case .cancel: probe.cancel()
            case .cancelSync: probe.cancelSync()
            case .rearm: probe.armOnce(at: deadline)
            case .move: probe.move(at: deadline)
            case .destroy: probe.destroy()
            }
        }

        /// 20,000 armed timers, one thread operating on them while another stops the
        /// engine: every call returns an error or succeeds, every context is released once.
        @Test(arguments: Operation.allCases)
        func stopRacingTimerOperations(operation: Operation) throws {
            let engine = try Engine(expectedTimers: 20_000)
            let probes = try engine.makeTimers(20_000)
            let now = Time.monotonic()
            for (k, probe) in probes.enumerated() {
                // Some due during the race, most far ahead.
                try #require(probe.armOnce(at: now + Int64(k % 50) * Time.ms + (k % 2 == 0 ? Time.s : 0)) == 0)
            }
            let unexpected = Atomic<Int>(0)
            let started = Gate()
            let worker = try PosixThread.spawn {
                started.open()
                for _ in 0..<3 {
                    for probe in probes {
                        let rc = Self.run(operation, on: probe, at: Time.monotonic() + Time.ms)
                        if !Self.answersDuringStop.contains(rc) { unexpected.add(1, ordering: .relaxed) }
                    }
                }
            }
            #expect(started.pass())
            engine.stop()
            worker.join()
            #expect(unexpected.load(ordering: .relaxed) == 0)
            for probe in probes.prefix(100) {
                #expect(probe.armOnce(at: now) != 0, "a timer armed after the stop")
            }
            #expect(engine.counters.armed == 0 && engine.counters.timers == 0)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// While the stop releases contexts, each release operates on a sibling timer (one
        /// already released, or one still to come): answered, never a crash, and each
        /// context still released once.
        @Test(arguments: Operation.allCases)
        func releaseOperatingOnASiblingDuringStop(operation: Operation) throws {
            let engine = try Engine()
            let probes = try engine.makeTimers(1_000)
            let unexpected = Atomic<Int>(0)
            let far = Time.monotonic() + 10 * Time.s
            for (k, probe) in probes.enumerated() {
                let sibling = probes[(k * 7 + 3) % probes.count]
                // Weak: the probes would otherwise hold each other for ever.
                probe.onRelease = { [weak sibling] _ in
                    guard let sibling else { return }
                    let rc = Self.run(operation, on: sibling, at: far)
                    if !Self.answersDuringStop.contains(rc) { unexpected.add(1, ordering: .relaxed) }
                }
                try #require(probe.armOnce(at: far) == 0)
            }
            engine.stop()
            #expect(unexpected.load(ordering: .relaxed) == 0)
            #expect(engine.counters.timers == 0)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// A callback destroys its engine while another thread waits in stop for that same
        /// callback: the engine is freed by whichever lets go last, after both returned.
        @Test func destroyFromACallbackWhileAnotherThreadStops() throws {
            let engine = try Engine()
            let sibling = try engine.makeTimer()
            let far = Time.monotonic() + 3_600 * Time.s
            let stopBegan = Atomic<Bool>(false)
            let probe = try engine.makeTimer { callback in
                // Destroys only once the stop has begun, which refuses every arming from
                // then on: a stop called after the callback returned would find the engine
                // freed. However late the stopper runs, it is inside stop by then.
                let giveUp = Time.monotonic() + Bounds.patienceNs
                while sibling.armOnce(at: far) != ESHUTDOWN, Time.monotonic() < giveUp { Time.sleep(100 * Time.us) }
                stopBegan.store(sibling.armOnce(at: far) == ESHUTDOWN, ordering: .relaxed)
                mtr_engine_destroy(callback.engine.handle)
            }
            try #require(probe.armOnce(at: Time.monotonic() + Time.ms) == 0)
            try #require(engine.log.wait { $0.running == 1 })
            engine.markDestroyed()
            let stopper = try PosixThread.spawn { mtr_engine_stop(engine.handle) }
            stopper.join()
            let destroyedAfterTheStopBegan = stopBegan.load(ordering: .relaxed)
            #expect(destroyedAfterTheStopBegan, "the callback destroyed the engine before the stop began")
            #expect(engine.waitAllReleased())
            engine.expectAllReleasedOnce()
        }

        /// What the callback of `destroyFromACallbackWhileAnotherThreadCancelsSync` did.
        enum Decision: Equatable, Sendable {
            /// It returned with the engine intact: no waiter, or a cancel_sync that returned
            /// while the callback it was to wait for still ran.
            case leftTheEngine
            /// It destroyed the engine while the waiter slept in cancel_sync.
            case destroyed(onThread: Int32)
        }

        /// A callback destroys its engine while another thread waits in cancel_sync for it:
        /// the waiter returns, and the engine is freed once (by the waiter or the thread).
        @Test(arguments: [UInt32(1), 4])
        func destroyFromACallbackWhileAnotherThreadCancelsSync(shards: UInt32) throws {
            let engine = try Engine(cpu: 0, shards: shards)
            let waiter = Monitor(CancelSync.Waiter())
            let waiterThread = Monitor<PosixThread?>(nil)
            let decision = Monitor<Decision?>(nil)
            let probe = try engine.makeTimer { callback in
                // A firing thread never waits in cancel_sync: the waiter is a thread of its
                // own, started here so that it inherits the firing thread's CPU.
                guard
                    let thread = try? CancelSync.cancelSyncOnAThread(callback.engine, callback.tick.timer, into: waiter)
                else { return decision.update { $0 = .leftTheEngine } }
                waiterThread.update { $0 = thread }
                // Destroys only once the waiter sleeps, in cancel_sync (all it does), however
                // late a loaded machine runs it; a cancel_sync that returns first ends the wait.
                while waiter.read({ $0.result == nil }), !KernelThread.isSleeping(waiter.read { $0.tid } ?? -1) {
                    Time.sleep(Time.ms)
                }
                guard let tid = waiter.read({ $0.result == nil ? $0.tid : nil }) else {
                    return decision.update { $0 = .leftTheEngine }
                }
                // At the lowest priority on this CPU, the waiter, woken when this callback
                // ends, runs only once the firing thread is done: it lets go of the engine last
                // and frees it. Were the engine freed before that, it would wait on freed
                // memory for ever.
                var idle = sched_param()
                _ = sched_setscheduler(tid, Self.schedIdle, &idle)
                decision.update { $0 = .destroyed(onThread: KernelThread.currentID()) }
                mtr_engine_destroy(callback.engine.handle)
            }
            engine.markDestroyed()
            try #require(probe.armOnce(at: Time.monotonic() + Time.ms) == 0)
            // Each wait is for what must happen: its patience runs out only on failure.
            try #require(decision.wait { $0 != nil }, "the waiter never slept in cancel_sync")
            guard let thread = waiterThread.read({ $0 }) else {
                Issue.record("the waiter's thread did not start")
                mtr_engine_destroy(engine.handle)
                return
            }
            if case .destroyed(let firingThread) = decision.read({ $0 }) {
                // Gone, the firing thread has let go. The waiter gets a normal share again, so
                // that its return never waits on what else the machine runs.
                #expect(
                    eventually(timeout: .nanoseconds(Bounds.patienceNs)) {
                        KernelThread.state(ofThread: firingThread) == nil
                    })
                var normal = sched_param()
                _ = sched_setscheduler(waiter.read { $0.tid } ?? -1, SCHED_OTHER, &normal)
            }
            guard waiter.wait(until: { $0.result != nil }) else {
                Issue.record("cancel_sync never returned: the engine was freed under it")
                return  // its thread is stuck for good: leave it
            }
            thread.join()
            guard decision.read({ $0 }) != .leftTheEngine else {
                Issue.record("cancel_sync returned while the callback it was to wait for still ran")
                mtr_engine_destroy(engine.handle)
                return
            }
            #expect(waiter.read { $0.result } == 0)
            #expect(engine.waitAllReleased())
            engine.expectAllReleasedOnce()
        }

        /// A callback stops its engine and then arms another timer: refused, not armed on an
        /// engine whose timers are being dropped.
        @Test func armAfterAStopFromACallbackIsRefused() throws {
            let engine = try Engine()
            let other = try engine.makeTimer()
            let rc = Atomic<Int32>(-1)
            let probe = try engine.makeTimer { callback in
                mtr_engine_stop(callback.engine.handle)
                rc.store(other.armOnce(at: Time.monotonic() + Time.s), ordering: .relaxed)
            }
            try #require(probe.armOnce(at: Time.monotonic() + Time.ms) == 0)
            #expect(engine.waitFirings(1))
            engine.stop()
            #expect(rc.load(ordering: .relaxed) == ESHUTDOWN)
            engine.destroyAndExpectAllReleasedOnce()
        }
    }
}
#endif
