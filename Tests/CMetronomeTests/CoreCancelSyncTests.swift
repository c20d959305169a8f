#if Engine
// cancel_sync against what a running callback may do while the caller waits for it: re-arm
// or move its own timer, or destroy the engine. The caller is known to be waiting when its
// thread sleeps (`/proc`), so each test reaches the interleaving it names on every run.
import CMetronome
import Glibc
import Testing

extension CoreContractTests {
    @Suite(.serialized, .tags(.realTime))
    struct CancelSync {
        /// How the running callback gives its timer a new schedule.
        enum ReArm: Sendable, CaseIterable {
            case arm
            case move
        }

        /// A thread in cancel_sync, and what the call returned once it has.
        struct Waiter: Sendable {
            var tid: Int32?
            var result: Int32?
        }

        /// Runs cancel_sync of `id` on a thread of its own, publishing its kernel thread id
        /// first, so that a callback can wait until the call sleeps.
        static func cancelSyncOnAThread(_ engine: EngineRef, _ id: mtr_timer_id, into waiter: Monitor<Waiter>)
            throws -> PosixThread
        {
            try PosixThread.spawn {
                waiter.update { $0.tid = KernelThread.currentID() }
                let rc = mtr_timer_cancel_sync(engine.handle, id)
                waiter.update { $0.result = rc }
            }
        }

        /// Waits until the waiter's thread sleeps: in cancel_sync, which is all it does.
        static func waitUntilAsleep(_ waiter: Monitor<Waiter>) -> Bool {
            guard waiter.wait(until: { $0.tid != nil }), let tid = waiter.read({ $0.tid }) else { return false }
            return eventually(timeout: .nanoseconds(Bounds.patienceNs)) { KernelThread.isSleeping(tid) }
        }

        /// The running callback re-arms (or moves) its own timer, due at once, after a
        /// cancel_sync has begun to wait for it: once cancel_sync returns the timer is
        /// disarmed and never fires again, as if the re-arm had come before the cancel.
        @Test(arguments: ReArm.allCases)
        func aReArmByTheRunningCallbackDoesNotOutliveCancelSync(_ reArm: ReArm) throws {
            let engine = try Engine()
            let waiter = Monitor(Waiter())
            let probe = try engine.makeTimer { callback in
                guard callback.firing == 0, Self.waitUntilAsleep(waiter) else { return }
                let handle = callback.engine.handle
                switch reArm {
                case .arm:
                    _ = mtr_timer_arm_once(handle, callback.tick.timer, .MTR_CLOCK_MONOTONIC, 0, 0)
                case .move:
                    var moved: mtr_timer_id = 0
                    _ = mtr_timer_move(handle, callback.tick.timer, .MTR_CLOCK_MONOTONIC, 0, 0, 0, &moved)
                }
            }
            let id = probe.id
            try #require(probe.armOnce(at: Time.monotonic() + 10 * Time.ms) == 0)
            try #require(engine.log.wait { $0.running == 1 })

            let thread = try Self.cancelSyncOnAThread(engine.ref, id, into: waiter)
            thread.join()
            #expect(waiter.read { $0.result } == 0)
            #expect(engine.counters.armed == 0, "the callback's re-arm outlived cancel_sync")
            #expect(!engine.log.wait(timeoutNs: 100 * Time.ms) { $0.firings.count > 1 })
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// A callback destroys its engine while another thread waits in cancel_sync for it:
        /// the waiter and the firing thread each let go of the engine as the last thing they
        /// do with it, and whichever is last frees it. Many rounds, so that both orders of
        /// their last steps occur (the sanitizer passes catch a touch after the free).
        @Test
        func aCallbackDestroysItsEngineWhileCancelSyncWaits() throws {
            for _ in 0..<50 {
                let engine = try Engine()
                let waiter = Monitor(Waiter())
                let probe = try engine.makeTimer { callback in
                    guard Self.waitUntilAsleep(waiter) else { return }
                    mtr_engine_destroy(callback.engine.handle)
                }
                engine.markDestroyed()
                try #require(probe.armOnce(at: Time.monotonic()) == 0)
                try #require(engine.log.wait { $0.running == 1 })
                let thread = try Self.cancelSyncOnAThread(engine.ref, probe.id, into: waiter)
                thread.join()
                #expect(waiter.read { $0.result } == 0)
                #expect(engine.waitAllReleased())
                engine.expectAllReleasedOnce()
            }
        }
    }
}
#endif
