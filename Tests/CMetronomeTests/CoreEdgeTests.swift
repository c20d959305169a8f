#if Engine
// An engine's stop and destroy racing the other threads that use it and its own
// callbacks, against the C core: every call answers, and every context is released once.
import CMetronome
import Foundation
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

        /// A callback destroys its engine while another thread waits in cancel_sync for it:
        /// the waiter returns, and the engine is freed once (by the waiter or the thread).
        @Test(arguments: [UInt32(1), 4])
        func destroyFromACallbackWhileAnotherThreadCancelsSync(shards: UInt32) throws {
            // The waiter shares the firing thread's CPU at the lowest priority, so it gets
            // the lock back only after the firing thread is done: were the engine freed
            // then, the waiter would wait on freed memory for ever.
            let engine = try Engine(cpu: 0, shards: shards)
            let waiting = Gate()
            let returned = Gate()
            let waiterThread = Atomic<Int32>(-1)
            let probe = try engine.makeTimer { callback in
                _ = waiting.pass()
                // Destroying before the waiter is inside cancel_sync would free the engine
                // under a call still to come: wait until its thread sleeps (in that call's
                // wait, the only place it can block), however late a loaded machine runs it.
                let tid = waiterThread.load(ordering: .acquiring)
                for _ in 0..<5_000 where !KernelThread.isSleeping(tid) { Time.sleep(Time.ms) }
                Time.sleep(5 * Time.ms)
                mtr_engine_destroy(callback.engine.handle)
            }
            try #require(probe.armOnce(at: Time.monotonic() + Time.ms) == 0)
            try #require(engine.log.wait { $0.running == 1 })
            engine.markDestroyed()
            let rc = Atomic<Int32>(-1)
            // The waiter: the firing thread of a second engine, pinned to the same CPU.
            let waiters = try Engine(cpu: 0)
            let name = withUnsafeBytes(of: waiters.info.name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            waiterThread.store(Self.thread(named: name), ordering: .releasing)
            let waiter = try waiters.makeTimer { _ in
                var param = sched_param()
                _ = sched_setscheduler(0, Self.schedIdle, &param)
                waiting.open()
                rc.store(probe.cancelSync(), ordering: .relaxed)
                returned.open()
            }
            try #require(waiter.armOnce(at: Time.monotonic()) == 0)
            guard returned.pass(timeout: .nanoseconds(Bounds.patienceNs)) else {
                waiters.markDestroyed()  // its thread is stuck for good: leave it
                Issue.record("cancel_sync never returned: the engine was freed under it")
                return
            }
            waiters.destroy()
            #expect(rc.load(ordering: .relaxed) == 0)
            #expect(engine.waitAllReleased())
            engine.expectAllReleasedOnce()
        }

        /// The id of this process's thread whose name is `name`, or -1.
        static func thread(named name: String) -> Int32 {
            let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
            let named = tasks.first {
                (try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8)) == name + "\n"
            }
            return named.flatMap { Int32($0) } ?? -1
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
