// The edges of an engine's life, against the C core: shutdown racing every timer
// operation and triggered from callbacks, fork, descriptor exhaustion, the spin window,
// wrap-around of ids and arm order, and memory given back after a peak.
import CMetronome
import Foundation
import Glibc
import Synchronization
import Testing

extension CoreContractTests {
    @Suite(.serialized, .tags(.realTime))
    struct Edges {
        // MARK: Shutdown racing other threads

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
        @Test(.timeLimit(.minutes(1)), arguments: Operation.allCases)
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
            engine.destroy()
            engine.expectAllReleasedOnce()
        }

        /// While the stop releases contexts, each release operates on a sibling timer (one
        /// already released, or one still to come): answered, never a crash, and each
        /// context still released once.
        @Test(.timeLimit(.minutes(1)), arguments: Operation.allCases)
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
            engine.destroy()
            engine.expectAllReleasedOnce()
        }

        /// A callback destroys its engine while another thread waits in stop for that same
        /// callback: the engine is freed by whichever lets go last, after both returned.
        @Test(.timeLimit(.minutes(1)))
        func destroyFromACallbackWhileAnotherThreadStops() throws {
            let engine = try Engine()
            let stopping = Gate()
            let probe = try engine.makeTimer { callback in
                _ = stopping.pass()
                Time.sleep(5 * Time.ms)  // the stopper is inside the join by now
                mtr_engine_destroy(callback.engine.handle)
            }
            try #require(probe.armOnce(at: Time.monotonic() + Time.ms) == 0)
            try #require(engine.log.wait { $0.running == 1 })
            engine.markDestroyed()
            let stopper = try PosixThread.spawn {
                stopping.open()
                mtr_engine_stop(engine.handle)
            }
            stopper.join()
            #expect(engine.waitAllReleased())
            engine.expectAllReleasedOnce()
        }

        /// A callback destroys its engine while another thread waits in cancel_sync for it:
        /// the waiter returns, and the engine is freed once (by the waiter or the thread).
        @Test(.timeLimit(.minutes(1)), arguments: [UInt32(1), 4])
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
            guard returned.pass(timeout: .seconds(5)) else {
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

        // MARK: fork

        /// A forked child finds the parent's engine dead: every arming is refused, destroying
        /// it releases the child's copies of the contexts, and nothing it does reaches the
        /// parent, whose timer still fires on time. A new engine works in the child.
        @Test(.timeLimit(.minutes(1)), arguments: [UInt32(1), 4])
        func forkedChildNeverTouchesTheParentsEngine(shards: UInt32) throws {
            let engine = try Engine(shards: shards)
            let parentTimer = try engine.makeTimer()
            let spare = try engine.makeTimer()
            let deadline = Time.monotonic() + 300 * Time.ms
            try #require(parentTimer.armOnce(at: deadline) == 0)

            let code = exitCodeOfChild {
                guard mtr_engine_is_inherited(engine.handle) == 1 else { return 10 }
                // Would move the parent's wake-up: the timerfd is one file for both.
                guard parentTimer.armOnce(at: Time.monotonic() + Time.s) == ESHUTDOWN,
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
            #expect(engine.waitFirings(1))
            let firing = try #require(engine.firings.first)
            #expect(firing.fired >= deadline)
            #expect(firing.fired - deadline < Bounds.lateSlackNs, "the child moved the parent's wake-up")
            engine.destroy()
            engine.expectAllReleasedOnce()
        }

        /// A forked child that can open no descriptor still destroys the engine it inherited,
        /// releasing the contexts, and leaves the parent's timer to fire on time. The child's
        /// teardown used to give the event base an epoll instance of its own first
        /// (`event_reinit`), and libevent ended the process when it could not make one.
        @Test(.timeLimit(.minutes(1)), arguments: [UInt32(1), 4])
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
            #expect(engine.waitFirings(1))
            let firing = try #require(engine.firings.first)
            #expect(firing.fired - deadline < Bounds.lateSlackNs, "the child moved the parent's wake-up")
            engine.destroy()
            engine.expectAllReleasedOnce()
        }

        /// A fork while two engines of the most shards exist: the fork handlers hold all 130
        /// of their locks at once, and the child finds both engines inherited. (Announced to
        /// ThreadSanitizer, those shard locks overflowed the 128 locks one thread may hold in
        /// its deadlock detector, which then hung the fork.)
        @Test(.timeLimit(.minutes(1)))
        func forkWhileTwoEnginesOfTheMostShardsExist() throws {
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
        @Test(.timeLimit(.minutes(1)), arguments: [UInt32(1), 4])
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
            engine.destroy()
            engine.expectAllReleasedOnce()
        }

        /// A fork waits while another thread holds the shared slot: the child finds it free
        /// and holding what the holder stored back, never held by a thread the child lacks.
        /// The slot's value is left as it is: it may be the Swift layer's shared engine.
        @Test(.timeLimit(.minutes(1)))
        func sharedSlotIsFreeInAChildForkedWhileItIsHeld() throws {
            let held = Atomic<Int>(0)
            let holding = Atomic<Bool>(false)
            let holder = try PosixThread.spawn {
                let value = mtr_shared_lock()
                held.store(Int(bitPattern: value), ordering: .relaxed)
                holding.store(true, ordering: .releasing)
                Time.sleep(50 * Time.ms)
                mtr_shared_unlock(value)
            }
            while !holding.load(ordering: .acquiring) { sched_yield() }
            let expected = UnsafeMutableRawPointer(bitPattern: held.load(ordering: .relaxed))
            let forked = Time.monotonic()
            let code = exitCodeOfChild {
                let value = mtr_shared_lock()
                mtr_shared_unlock(value)
                return value == expected ? 0 : 10
            }
            let waited = Time.monotonic() - forked
            holder.join()
            #expect(code == 0)
            // The fork itself waited for the holder to let go.
            #expect(waited >= 40 * Time.ms, "the fork went ahead after \(waited / Time.us) µs")
        }

        // MARK: Descriptors

        /// With every count of free descriptors from none up, creation either succeeds or
        /// returns EMFILE, leaving no descriptor open; it never exits the process. Run in a
        /// child, whose descriptor limit can be lowered without touching the test runner.
        @Test(
            .timeLimit(.minutes(1)),
            .disabled(if: Bounds.threadSanitized, "TSan does not support threads after a multi-threaded fork"),
            arguments: [UInt32(1), 4])
        func creationWithTooFewDescriptorsReturnsEMFILE(shards: UInt32) {
            // Three timerfds per shard, an epoll instance and a pipe.
            let expected = 3 * Int32(shards) + 3
            let code = exitCodeOfChild {
                var limit = rlimit()
                getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
                for fd in 3..<Int32(min(limit.rlim_cur, 4096)) { close(fd) }
                var config = mtr_engine_config()
                mtr_engine_config_init(&config)
                config.on_fire = { _, _ in }
                config.shards = shards
                var needed: Int32 = -1
                for free in Int32(0)...(expected + 4) {
                    var lowered = limit
                    lowered.rlim_cur = rlim_t(3 + free)
                    guard setrlimit(Int32(RLIMIT_NOFILE.rawValue), &lowered) == 0 else { return 20 }
                    var handle: OpaquePointer?
                    let rc = mtr_engine_create(&config, &handle)
                    if rc == 0, let handle {
                        if needed < 0 { needed = free }
                        mtr_engine_destroy(handle)
                    } else if rc != EMFILE || needed >= 0 {
                        return 21  // an error other than EMFILE, or a failure after a success
                    }
                    for fd in Int32(3)..<Int32(3 + free) where fcntl(fd, F_GETFD) != -1 {
                        return 22  // a descriptor leaked
                    }
                }
                return needed == expected ? 0 : 23
            }
            #expect(code == 0)
        }

        // MARK: Spin window

        /// The spin window is bounded: above MTR_SPIN_MAX_NS the configuration is refused,
        /// naming the setting.
        @Test func spinWindowAboveTheBoundIsRefused() throws {
            var config = mtr_engine_config()
            mtr_engine_config_init(&config)
            config.on_fire = { _, _ in }
            var setting = mtr_engine_setting.MTR_SETTING_NONE
            config.spin_ns = Int64(MTR_SPIN_MAX_NS)
            #expect(mtr_engine_config_check(&config, &setting) == 0 && setting == .MTR_SETTING_NONE)
            for spin in [Int64(MTR_SPIN_MAX_NS) + 1, 2 * Time.s, .max, -1] {
                config.spin_ns = spin
                #expect(mtr_engine_config_check(&config, &setting) == EINVAL && setting == .MTR_SETTING_SPIN)
                var handle: OpaquePointer?
                #expect(mtr_engine_create(&config, &handle) == EINVAL && handle == nil)
            }
        }

        /// A timer armed while the engine spins for a later one, with an earlier deadline,
        /// ends the spin: it fires before the later timer's deadline, not after it.
        @Test(.timeLimit(.minutes(1)))
        func anEarlierTimerEndsASpin() throws {
            let spin = Int64(MTR_SPIN_MAX_NS)
            var results: [(earlierFired: Int64, laterDeadline: Int64)] = []
            // A trial counts only if the test thread armed the earlier timer inside the spin
            // and ahead of the later deadline; a stalled machine retries.
            for _ in 0..<200 where results.count < 3 {
                let engine = try Engine(spinNs: spin)
                let later = try engine.makeTimer()
                let earlier = try engine.makeTimer()
                let laterDeadline = Time.monotonic() + 20 * Time.ms
                try #require(later.armOnce(at: laterDeadline) == 0)
                // A sleep overshoots by more than the spin lasts: sleep short, spin the rest.
                Time.sleep(laterDeadline - 5 * Time.ms - Time.monotonic())
                Time.spin(laterDeadline - spin / 2 - Time.monotonic())
                let earlierDeadline = Time.monotonic() + 50 * Time.us
                guard earlierDeadline < laterDeadline - spin / 4, engine.firings.isEmpty else { continue }
                try #require(earlier.armOnce(at: earlierDeadline) == 0)
                #expect(engine.waitFirings(2))
                let first = try #require(engine.firings.first { $0.probe == earlier.index })
                results.append((first.fired, laterDeadline))
                engine.destroy()
                engine.expectAllReleasedOnce()
            }
            try #require(!results.isEmpty, "the machine never let the test arm inside a spin")
            // Without the interruption no trial can pass; a preempted firing thread can fail
            // one, so one is enough.
            #expect(
                results.contains { $0.earlierFired < $0.laterDeadline },
                "the spin did not notice the earlier timer: \(results.map { ($0.earlierFired - $0.laterDeadline) / Time.us }) µs past the later deadline"
            )
        }

        /// A stop during a spin ends it at once: stop returns before the deadline spun for.
        @Test(.timeLimit(.minutes(1)))
        func stopEndsASpin() throws {
            let spin = Int64(MTR_SPIN_MAX_NS)
            var trials = 0
            var endedEarly = 0
            for _ in 0..<200 where endedEarly == 0 {
                let engine = try Engine(spinNs: spin)
                let probe = try engine.makeTimer()
                let deadline = Time.monotonic() + 10 * Time.ms
                try #require(probe.armOnce(at: deadline) == 0)
                Time.sleep(deadline - 5 * Time.ms - Time.monotonic())
                Time.spin(deadline - spin / 2 - Time.monotonic())
                // Counts only if the firing thread is spinning now: woken once, not yet due.
                if engine.counters.wakeups == 1, Time.monotonic() < deadline - spin / 4 {
                    trials += 1
                    engine.stop()
                    if Time.monotonic() < deadline { endedEarly += 1 }
                }
                engine.stop()
                #expect(engine.firings.allSatisfy { $0.fired >= deadline })
                engine.destroy()
                engine.expectAllReleasedOnce()
            }
            try #require(trials > 0, "the machine never let the test stop inside a spin")
            #expect(endedEarly > 0, "stop waited for the spin to reach the deadline (\(trials) trials)")
        }

        /// A callback stops its engine and then arms another timer: refused, not armed on an
        /// engine whose timers are being dropped.
        @Test(.timeLimit(.minutes(1)))
        func armAfterAStopFromACallbackIsRefused() throws {
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
            engine.destroy()
            engine.expectAllReleasedOnce()
        }

        // MARK: Wrap-around

        /// Equal deadlines fire in arm order however many arms happened between them: arm
        /// order is renumbered before it could wrap.
        @Test(.timeLimit(.minutes(1)), arguments: [UInt64(1) << 31, UInt64(3) << 31 + 5, UInt64(5) << 31 + 1])
        func armOrderSurvivesWrapAround(arms: UInt64) throws {
            let engine = try Engine()
            let first = try engine.makeTimer()
            let second = try engine.makeTimer()
            let third = try engine.makeTimer()
            let deadline = Time.monotonic() + 20 * Time.ms
            try #require(first.armOnce(at: deadline) == 0)
            #expect(mtr_engine_age_for_testing(engine.handle, arms / 2, 0) == 0)
            try #require(second.armOnce(at: deadline) == 0)
            #expect(mtr_engine_age_for_testing(engine.handle, arms - arms / 2, 0) == 0)
            try #require(third.armOnce(at: deadline) == 0)
            #expect(engine.waitFirings(3))
            #expect(engine.firings.map(\.probe) == [first.index, second.index, third.index])
            engine.destroy()
            engine.expectAllReleasedOnce()
        }

        /// A slot whose generations are spent is retired: its first id never validates
        /// again, however often the slot was reused.
        @Test func spentSlotIsRetiredNotReused() throws {
            let engine = try Engine()
            // The slot's first four lives, so that low generations a regrown slot could
            // start from are held.
            var early: [Probe] = []
            for _ in 0..<4 {
                let probe = try engine.makeTimer()
                #expect(probe.destroy() == 0)
                early.append(probe)
            }
            let old = early[0]
            #expect(mtr_engine_age_for_testing(engine.handle, 0, .max) == 0)
            let last = try engine.makeTimer()  // the slot's last generation
            #expect(UInt32(truncatingIfNeeded: last.id) == UInt32(truncatingIfNeeded: old.id))
            #expect(last.destroy() == 0)
            let next = try engine.makeTimer()
            #expect(UInt32(truncatingIfNeeded: next.id) != UInt32(truncatingIfNeeded: old.id))
            #expect(old.destroy() == EINVAL && old.cancel() == EINVAL, "a stale id validated again")
            #expect(next.armOnce(at: Time.monotonic() + Time.s) == 0 && next.cancel() == 0)
            #expect(next.destroy() == 0)
            // A peak and its drain shrink the array, and a new peak grows it back: given up
            // and grown back, the spent slot would start again from generations its ids had.
            for _ in 0..<3 {
                let peak = try engine.makeTimers(10_000)
                let stale = (early + [last]).filter { $0.cancel() != EINVAL }
                #expect(stale.isEmpty, "a spent slot's id validated again")
                for probe in peak { #expect(probe.destroy() == 0) }
            }
            engine.destroy()
            engine.expectAllReleasedOnce()
        }

        // MARK: Memory

        /// The memory taken for 100,000 timers is given back once they are destroyed; ids of
        /// the given-back slots stay stale when the array grows over them again.
        @Test(.timeLimit(.minutes(1)))
        func memoryIsGivenBackAfterAPeak() throws {
            let engine = try Engine(expectedTimers: 200_000)
            let idle = engine.counters.memory_bytes
            let peak = try engine.makeTimers(100_000)
            let far = Time.monotonic() + 60 * Time.s
            for probe in peak { try #require(probe.armOnce(at: far) == 0) }
            let held = engine.counters.memory_bytes
            #expect(held >= 100_000 * 56, "\(held) bytes for 100,000 armed timers")
            for probe in peak { #expect(probe.destroy() == 0) }
            let after = engine.counters.memory_bytes
            #expect(after <= idle + 64 * 1024, "\(after) bytes kept after the peak (\(held) at it)")

            let again = try engine.makeTimers(100_000)
            #expect(peak.allSatisfy { $0.cancel() == EINVAL }, "an id of a given-back slot validated")
            for probe in again { #expect(probe.destroy() == 0) }
            engine.stop()
            #expect(engine.counters.memory_bytes == 0)
            engine.destroy()
            engine.expectAllReleasedOnce()
        }

        /// With memory exhausted, what needs memory is refused with `ENOMEM` and changes
        /// nothing, and everything else goes on: a new timer needs a bigger array, and an
        /// arm into a full heap (or an empty one) needs it to grow; a move within a heap, a
        /// cancel, a destroy and a create into a freed slot need nothing, and armed timers
        /// fire. A timer refused a move to another clock keeps its old schedule and fires.
        ///
        /// In a forked child, whose address space is capped where it stands and whose free
        /// heap memory is all taken (`exhaustingMemory`), so every allocation fails.
        @Test(
            .timeLimit(.minutes(1)),
            .disabled(if: Bounds.sanitized, "a sanitizer's allocator ends the process when memory runs out"))
        func exhaustedMemoryRefusesOnlyWhatNeedsMemory() {
            let code = exitCodeOfChild(timeoutNs: 20 * Time.s) {
                var config = mtr_engine_config()
                mtr_engine_config_init(&config)
                config.on_fire = { context, _ in
                    guard let context else { return }
                    Unmanaged<FiringCount>.fromOpaque(context).takeUnretainedValue().add()
                }
                var handle: OpaquePointer?
                guard mtr_engine_create(&config, &handle) == 0, let engine = handle else { return 10 }
                // 128 timers fill the array's second size; 64 armed fill the heap's first.
                let moved = FiringCount()
                let earlier = FiringCount()
                let ids = UnsafeMutablePointer<mtr_timer_id>.allocate(capacity: 129)
                for index in 0..<128 {
                    let counter = index == 0 ? moved : index == 1 ? earlier : nil
                    let context = counter.map { Unmanaged.passRetained($0).toOpaque() }
                    guard mtr_timer_create(engine, context, &ids[index]) == 0 else { return 11 }
                }
                let far = Time.monotonic() + 3_600 * Time.s
                for index in 0..<64 where mtr_timer_arm_once(engine, ids[index], .MTR_CLOCK_MONOTONIC, far, 0) != 0 {
                    return 12
                }
                let exhausted = Self.exhaustingMemory {
                    // Timed from here: taking the memory may take a while.
                    let start = Time.monotonic()
                    var counters = mtr_counters()
                    guard mtr_timer_create(engine, nil, &ids[128]) == ENOMEM else { return 20 }
                    guard mtr_timer_arm_once(engine, ids[64], .MTR_CLOCK_MONOTONIC, far, 0) == ENOMEM else { return 21 }
                    guard mtr_timer_arm_once(engine, ids[0], .MTR_CLOCK_MONOTONIC, start + 60 * Time.ms, 0) == 0,
                        mtr_timer_arm_once(engine, ids[1], .MTR_CLOCK_MONOTONIC, start + 30 * Time.ms, 0) == 0,
                        mtr_timer_arm_repeating(engine, ids[2], .MTR_CLOCK_MONOTONIC, far, Time.s, 0) == 0
                    else { return 22 }
                    guard mtr_timer_arm_once(engine, ids[0], .MTR_CLOCK_REALTIME, far, 0) == ENOMEM else { return 23 }
                    mtr_engine_get_counters(engine, &counters)
                    guard counters.armed == 64 else { return 24 }  // the refused move disarmed its timer
                    guard mtr_timer_cancel(engine, ids[3]) == 0,
                        mtr_timer_arm_once(engine, ids[64], .MTR_CLOCK_MONOTONIC, far, 0) == 0
                    else { return 25 }
                    guard mtr_timer_destroy(engine, ids[4]) == 0, mtr_timer_create(engine, nil, &ids[128]) == 0 else {
                        return 26
                    }
                    while Time.monotonic() < start + 100 * Time.ms { Time.sleep(Time.ms) }
                    mtr_engine_get_counters(engine, &counters)
                    guard earlier.count == 1, moved.count == 1 else { return 27 }
                    return counters.fired == 2 ? 0 : 28
                }
                guard exhausted == 0 else { return exhausted }
                guard mtr_timer_arm_once(engine, ids[0], .MTR_CLOCK_REALTIME, far, 0) == 0 else { return 30 }
                mtr_engine_destroy(engine)
                return 0
            }
            #expect(code == 0)
        }

        /// Runs `body` with no memory to be had: the address space capped where it stands,
        /// then every free block of the allocator's taken, biggest sizes first, so that
        /// whatever `body` asks of `malloc` fails. Gives it all back after. C calls only, for
        /// a forked child; `body` may make no Swift allocation.
        static func exhaustingMemory(_ body: () -> Int32) -> Int32 {
            var original = rlimit()
            getrlimit(Int32(RLIMIT_AS.rawValue), &original)
            var capped = original
            capped.rlim_cur = rlim_t(addressSpaceBytes())
            guard capped.rlim_cur > 0, setrlimit(Int32(RLIMIT_AS.rawValue), &capped) == 0 else { return 90 }
            // A failed malloc moves on to another of the allocator's arenas (one per
            // thread the parent had), so only a long run of failures means all are empty.
            var taken: UnsafeMutableRawPointer?
            var size = 1 << 20
            var failures = 0
            while failures < 256 {
                if let block = malloc(size) {
                    block.storeBytes(of: taken, as: UnsafeMutableRawPointer?.self)
                    taken = block
                    failures = 0
                } else {
                    failures += 1
                    size = size > 16 ? size >> 4 : 1 << 20
                }
            }
            let result = body()
            while let block = taken {
                taken = block.load(as: UnsafeMutableRawPointer?.self)
                free(block)
            }
            setrlimit(Int32(RLIMIT_AS.rawValue), &original)
            return result
        }

        /// The process's address space in bytes (VmSize), read with C calls only.
        static func addressSpaceBytes() -> Int {
            let fd = open("/proc/self/statm", O_RDONLY)
            guard fd >= 0 else { return 0 }
            defer { close(fd) }
            var text = (UInt64(0), UInt64(0), UInt64(0), UInt64(0))  // the first field is enough
            let pages = withUnsafeMutableBytes(of: &text) { buffer -> Int in
                guard read(fd, buffer.baseAddress, buffer.count - 1) > 0 else { return 0 }
                return strtol(buffer.baseAddress!.assumingMemoryBound(to: CChar.self), nil, 10)
            }
            return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
        }
    }
}

/// Counts the firings of the timer it is the context of, with no allocation.
private final class FiringCount: Sendable {
    private let value = Atomic<Int>(0)
    func add() { self.value.add(1, ordering: .relaxed) }
    var count: Int { self.value.load(ordering: .relaxed) }
}
