#if Engine
// A shard's lock (mtr_lock.h) under more threads than CPUs, so that holders are preempted
// and waiters sleep: every operation still happens exactly once, and every thread waiting
// in cancel_sync for one callback is woken when it ends, and not before, whatever
// interrupts its sleep, a fork included.
import CMetronome
import Glibc
import Synchronization
import Testing

extension CoreContractTests {
    @Suite(.serialized, .tags(.realTime))
    struct ShardLock {
        /// Eight threads create, arm, re-arm and cancel timers in one shard at once: no two
        /// are given one slot, and the counts the shard keeps under its lock come out exactly
        /// as the threads' own (a lost update or a torn heap would not).
        @Test func oneShardCountsEveryOperationOfManyThreads() throws {
            let engine = try Engine(shards: 1)
            let handle = EngineRef(handle: engine.handle)
            let threads = 8
            let timersPerThread = 250
            let rounds = 600
            let far = Time.monotonic() + 3_600 * Time.s
            let results = Monitor([(ids: [mtr_timer_id], armed: Int, failures: Int)]())
            try Shards.onThreads(threads) { k in
                var random = SplitMix64(seed: 0x10C4 + UInt64(k))
                var ids = [mtr_timer_id](repeating: 0, count: timersPerThread)
                var armed = [Bool](repeating: false, count: timersPerThread)
                var failures = 0
                for i in ids.indices where mtr_timer_create(handle.handle, nil, &ids[i]) != 0 {
                    failures += 1
                }
                for _ in 0..<rounds {
                    for i in ids.indices {
                        let deadline = far + random.next(below: Time.s)
                        if random.next(below: 3) == 0 {
                            failures += mtr_timer_cancel(handle.handle, ids[i]) == 0 ? 0 : 1
                            armed[i] = false
                        } else {
                            let rc = mtr_timer_arm_once(handle.handle, ids[i], .MTR_CLOCK_MONOTONIC, deadline, 0)
                            failures += rc == 0 ? 0 : 1
                            armed[i] = true
                        }
                    }
                }
                let live = armed.filter { $0 }.count
                results.update { $0.append((ids, live, failures)) }
            }
            let all = results.read { $0 }
            try #require(all.count == threads)
            #expect(all.map(\.failures).reduce(0, +) == 0)
            let ids = all.flatMap(\.ids)
            #expect(Set(ids).count == threads * timersPerThread, "a slot went to two timers")
            #expect(engine.counters.timers == UInt64(threads * timersPerThread))
            #expect(engine.counters.armed == UInt64(all.map(\.armed).reduce(0, +)))
            for id in ids { #expect(mtr_timer_destroy(engine.handle, id) == 0) }
            #expect(engine.counters.timers == 0)
            #expect(engine.counters.armed == 0)
            engine.destroy()
        }

        /// Four threads wait in cancel_sync for one running callback: none returns while it
        /// runs, and each returns once it ends.
        @Test func everyCancelSyncWaiterReturnsWhenTheCallbackEnds() throws {
            let engine = try Engine()
            let sleepers = try CancelSyncSleepers(engine: engine, waiters: 4)
            #expect(eventually { sleepers.allAsleep })
            #expect(sleepers.returned == 0, "cancel_sync returned during the callback")
            guard sleepers.endCallbackAndJoin() else { return }
            #expect(sleepers.probe.destroy() == 0)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// A signal interrupting `cancel_sync`'s sleep does not end its wait, not even once
        /// the callback has moved its own timer (a new id, so `shard->running` is renamed):
        /// it returns when the callback ends.
        @Test func cancelSyncOutwaitsACallbackThatMovesItsTimerThroughSignals() throws {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { _ in }  // no SA_RESTART: sleeps return EINTR
            sigemptyset(&action.sa_mask)
            var previous = sigaction()
            try #require(sigaction(SIGUSR1, &action, &previous) == 0)
            defer { sigaction(SIGUSR1, &previous, nil) }

            let engine = try Engine()
            let entered = Atomic<Bool>(false)
            let waiting = Atomic<Bool>(false)
            let ended = Atomic<Bool>(false)
            let movedTo = Atomic<UInt64>(0)
            let waiterID = Atomic<Int32>(-1)
            let probe = try engine.makeTimer { callback in
                entered.store(true, ordering: .releasing)
                while !waiting.load(ordering: .acquiring) { Time.sleep(100 * Time.us) }
                // Moved before the waiter is inside cancel_sync, the timer would answer its
                // old id with EINVAL: wait until the waiter sleeps there.
                let tid = waiterID.load(ordering: .acquiring)
                for _ in 0..<5_000 where !KernelThread.isSleeping(tid) { Time.sleep(Time.ms) }
                var moved: mtr_timer_id = 0
                if mtr_timer_move(
                    callback.engine.handle, callback.tick.timer, .MTR_CLOCK_MONOTONIC,
                    Time.monotonic() + 3_600 * Time.s, 0, 0, &moved) == 0
                {
                    movedTo.store(moved, ordering: .releasing)
                }
                Time.sleep(100 * Time.ms)
                ended.store(true, ordering: .releasing)
            }
            try #require(probe.armOnce(at: Time.monotonic()) == 0)
            try #require(eventually { entered.load(ordering: .acquiring) })
            let thread = Atomic<UInt>(0)
            let code = Atomic<Int32>(-1)
            let endedWhenReturned = Atomic<Int>(-1)
            let waiter = try PosixThread.spawn {
                // A thread inherits its creator's mask, and the test runner's threads block
                // most signals.
                var usr1 = sigset_t()
                sigemptyset(&usr1)
                sigaddset(&usr1, SIGUSR1)
                pthread_sigmask(SIG_UNBLOCK, &usr1, nil)
                thread.store(UInt(pthread_self()), ordering: .releasing)
                waiterID.store(KernelThread.currentID(), ordering: .releasing)
                waiting.store(true, ordering: .releasing)
                code.store(probe.cancelSync(), ordering: .relaxed)
                endedWhenReturned.store(ended.load(ordering: .acquiring) ? 1 : 0, ordering: .releasing)
            }
            var signalsAfterTheMove = 0
            while endedWhenReturned.load(ordering: .acquiring) < 0 {
                if waiting.load(ordering: .acquiring) {
                    let moved = movedTo.load(ordering: .acquiring) != 0
                    pthread_kill(pthread_t(thread.load(ordering: .acquiring)), SIGUSR1)
                    if moved { signalsAfterTheMove += 1 }
                }
                Time.sleep(Time.ms)
            }
            waiter.join()
            #expect(signalsAfterTheMove >= 5, "the wait was not interrupted after the move")
            #expect(code.load(ordering: .relaxed) == 0)
            #expect(endedWhenReturned.load(ordering: .acquiring) == 1, "cancel_sync returned before the callback ended")
            let moved = movedTo.load(ordering: .acquiring)
            try #require(moved != 0, "the callback did not move its timer")
            #expect(mtr_timer_destroy(engine.handle, moved) == 0)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// A fork while threads sleep in cancel_sync on a running callback: the child, which
        /// has neither the callback nor the waiters, cancels and destroys the timer and its
        /// engine at once, releasing the context once; in the parent no waiter returns
        /// across the fork's taking of every shard lock, and all return when the callback
        /// ends.
        @Test func aChildForkedWhileCancelSyncWaitsFindsNoCallbackRunning() throws {
            let engine = try Engine()
            let sleepers = try CancelSyncSleepers(engine: engine, waiters: 2)
            let probe = sleepers.probe
            #expect(eventually { sleepers.allAsleep })
            let code = exitCodeOfChild {
                guard probe.cancelSync() == 0 else { return 10 }
                guard probe.destroy() == 0, probe.releases.load(ordering: .acquiring) == 1 else { return 11 }
                mtr_engine_destroy(engine.handle)
                return 0
            }
            #expect(code == 0, "the child waited for a callback it does not have")
            #expect(sleepers.returned == 0, "cancel_sync returned during the callback")
            guard sleepers.endCallbackAndJoin() else { return }
            #expect(probe.destroy() == 0)
            engine.destroyAndExpectAllReleasedOnce()
        }
    }
}

/// Threads asleep in cancel_sync on one running callback, which runs until
/// ``endCallbackAndJoin()``.
private final class CancelSyncSleepers: Sendable {
    /// What the callback and the waiters share with the test.
    private final class Shared: Sendable {
        let finish = Atomic<Bool>(false)
        let returns = Atomic<Int>(0)
        let threads = Monitor([Int32]())
    }

    let probe: Probe
    private let shared: Shared
    private let waiters: [PosixThread]

    /// Starts the probe's callback and, once it runs, `waiters` threads that cancel_sync it.
    /// Should that fail, the callback is ended, so that nothing is left spinning.
    init(engine: Engine, waiters: Int) throws {
        let shared = Shared()
        var started = false
        defer { if !started { shared.finish.store(true, ordering: .releasing) } }
        let entered = Atomic<Bool>(false)
        let probe = try engine.makeTimer { _ in
            entered.store(true, ordering: .releasing)
            while !shared.finish.load(ordering: .acquiring) { Time.sleep(100 * Time.us) }
        }
        try #require(probe.armOnce(at: Time.monotonic()) == 0)
        try #require(eventually { entered.load(ordering: .acquiring) })
        self.waiters = try (0..<waiters).map { _ in
            try PosixThread.spawn {
                shared.threads.update { $0.append(KernelThread.currentID()) }
                if probe.cancelSync() == 0 { shared.returns.add(1, ordering: .releasing) }
            }
        }
        self.probe = probe
        self.shared = shared
        started = true
    }

    /// Every waiter sleeps; asleep, a waiter is inside cancel_sync, the one place it blocks.
    var allAsleep: Bool {
        let tids = self.shared.threads.read { $0 }
        return tids.count == self.waiters.count && tids.allSatisfy { KernelThread.isSleeping($0) }
    }

    /// Waiters whose cancel_sync returned 0.
    var returned: Int { self.shared.returns.load(ordering: .acquiring) }

    /// Ends the callback and joins the waiters once all returned; records an issue and
    /// leaves them, blocked for good, when some are not woken within 10 s.
    func endCallbackAndJoin() -> Bool {
        self.shared.finish.store(true, ordering: .releasing)
        guard eventually(timeout: .seconds(10), { self.returned == self.waiters.count }) else {
            Issue.record("\(self.waiters.count - self.returned) cancel_sync callers were never woken")
            return false
        }
        self.waiters.forEach { $0.join() }
        return true
    }
}
#endif
