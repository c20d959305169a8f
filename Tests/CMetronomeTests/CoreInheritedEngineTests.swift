#if Engine
// An engine inherited by a forked child, against the C core: the child can neither arm
// nor disturb the parent's timers, tears its copy down, and forks wait for the C core's
// shared slot.
import CMetronome
import Glibc
import Synchronization
import Testing

extension CoreContractTests {
    @Suite(.serialized, .tags(.realTime))
    struct InheritedEngine {
        /// A forked child finds the parent's engine dead: every arming is refused, destroying
        /// it releases the child's copies of the contexts, and nothing it does reaches the
        /// parent, whose timer still fires. A new engine works in the child.
        @Test(arguments: [UInt32(1), 4])
        func forkedChildNeverTouchesTheParentsEngine(shards: UInt32) throws {
            let engine = try Engine(shards: shards)
            let parentTimer = try engine.makeTimer()
            let spare = try engine.makeTimer()
            let deadline = Time.monotonic() + 300 * Time.ms
            try #require(parentTimer.armOnce(at: deadline) == 0)

            let code = exitCodeOfChild {
                guard mtr_engine_is_inherited(engine.handle) == 1 else { return 10 }
                // Would move the parent's wake-up an hour out, past the test's patience: the
                // timerfd is one file for both.
                guard parentTimer.armOnce(at: Time.monotonic() + 3_600 * Time.s) == ESHUTDOWN,
                    spare.armOnce(at: Time.monotonic()) == ESHUTDOWN
                else { return 11 }
                var id: mtr_timer_id = 0
                guard mtr_timer_create(engine.handle, nil, &id) == ESHUTDOWN else { return 12 }
                guard mtr_engine_clock_changed(engine.handle, .MTR_CLOCK_MONOTONIC) == ESHUTDOWN else { return 13 }
                // Would remove the parent's timerfds from their shared epoll set.
                mtr_engine_destroy(engine.handle)
                guard parentTimer.releases.load(ordering: .acquiring) == 1,
                    spare.releases.load(ordering: .acquiring) == 1
                else { return 14 }
                guard let fresh = try? Engine(), mtr_engine_is_inherited(fresh.handle) == 0,
                    let probe = try? fresh.makeTimer(), probe.armOnce(at: Time.monotonic() + Time.ms) == 0,
                    fresh.waitFirings(1)
                else { return 15 }
                fresh.destroy()
                return 0
            }
            #expect(code == 0)
            #expect(mtr_engine_is_inherited(engine.handle) == 0)
            #expect(engine.waitFirings(1), "the child moved the parent's wake-up")
            #expect(engine.firings.map(\.scheduled) == [deadline])
            expectNeverEarly(engine.firings)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// A forked child that can open no descriptor still destroys the engine it inherited,
        /// releasing the contexts, and leaves the parent's timer to fire: the teardown must
        /// neither need a descriptor (libevent ends the process when `event_reinit` cannot
        /// make an epoll instance) nor touch the timerfds and epoll set the parent shares.
        @Test(arguments: [UInt32(1), 4])
        func aChildOutOfDescriptorsStillDestroysTheEngineItInherited(shards: UInt32) throws {
            let engine = try Engine(shards: shards)
            let parentTimer = try engine.makeTimer()
            let deadline = Time.monotonic() + 300 * Time.ms
            try #require(parentTimer.armOnce(at: deadline) == 0)
            let code = exitCodeOfChild {
                var none = rlimit(rlim_cur: 0, rlim_max: 0)
                getrlimit(Int32(RLIMIT_NOFILE.rawValue), &none)
                none.rlim_cur = 0
                guard setrlimit(Int32(RLIMIT_NOFILE.rawValue), &none) == 0, dup(0) == -1 else { return 10 }
                mtr_engine_destroy(engine.handle)
                return parentTimer.releases.load(ordering: .acquiring) == 1 ? 0 : 11
            }
            #expect(code == 0)
            #expect(engine.waitFirings(1), "the child disarmed the parent's wake-up")
            #expect(engine.firings.map(\.scheduled) == [deadline])
            expectNeverEarly(engine.firings)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// A fork while two engines of the most shards exist: the fork handlers hold all 130
        /// of their locks at once, and the child finds both engines inherited. (Announced to
        /// ThreadSanitizer, those shard locks overflowed the 128 locks one thread may hold in
        /// its deadlock detector, which then hung the fork.)
        @Test func forkWhileTwoEnginesOfTheMostShardsExist() throws {
            let first = try Engine(shards: 64)
            let second = try Engine(shards: 64)
            let code = exitCodeOfChild {
                mtr_engine_is_inherited(first.handle) == 1 && mtr_engine_is_inherited(second.handle) == 1 ? 0 : 10
            }
            #expect(code == 0)
            #expect(mtr_engine_is_inherited(first.handle) == 0)
            first.destroy()
            second.destroy()
        }

        /// In a forked child, a context release that destroys the inherited engine while
        /// `mtr_engine_stop` drops its timers, as a binding's last reference to its engine
        /// would, frees the engine only once the drop is over: every context is released
        /// once and nothing is read after the free (AddressSanitizer reported a
        /// use-after-free here).
        @Test(arguments: [UInt32(1), 4])
        func aReleaseInAForkedChildMayDestroyTheEngineItsStopDrops(shards: UInt32) throws {
            let engine = try Engine(shards: shards)
            let probes = try engine.makeTimers(8)
            let parent = getpid()
            let handle = engine.ref  // not the fixture, which holds the probes
            probes[0].onRelease = { _ in
                if getpid() != parent { mtr_engine_destroy(handle.handle) }
            }
            try #require(probes[1].armOnce(at: Time.monotonic() + 60 * Time.s) == 0)
            let code = exitCodeOfChild {
                mtr_engine_stop(engine.handle)
                return probes.allSatisfy { $0.releases.load(ordering: .acquiring) == 1 } ? 0 : 10
            }
            #expect(code == 0)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// A fork waits while another thread holds the shared slot: the child finds it free
        /// and holding what the holder stored back, never held by a thread the child lacks.
        /// The slot's value is left as it is: it may be the Swift layer's shared engine.
        @Test func sharedSlotIsFreeInAChildForkedWhileItIsHeld() throws {
            let held = Atomic<Int>(0)
            let holding = Atomic<Bool>(false)
            let lettingGo = Atomic<Bool>(false)
            let holder = try PosixThread.spawn {
                let value = mtr_shared_lock()
                held.store(Int(bitPattern: value), ordering: .relaxed)
                holding.store(true, ordering: .releasing)
                Time.sleep(50 * Time.ms)  // most likely, the fork comes meanwhile
                lettingGo.store(true, ordering: .releasing)
                mtr_shared_unlock(value)
            }
            while !holding.load(ordering: .acquiring) { sched_yield() }
            let expected = UnsafeMutableRawPointer(bitPattern: held.load(ordering: .relaxed))
            let code = exitCodeOfChild {
                // The child's memory is the parent's at the fork: the holder's last store
                // before letting go is in it only if the fork waited for the slot.
                guard lettingGo.load(ordering: .acquiring) else { return 11 }
                let value = mtr_shared_lock()
                mtr_shared_unlock(value)
                return value == expected ? 0 : 10
            }
            holder.join()
            #expect(code == 0)
        }
    }
}
#endif
