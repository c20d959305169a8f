#if Engine
// A sharded engine (mtr_engine_config.shards): each thread's timers live in a shard of
// their own, any thread may operate on any timer, and every guarantee holds per shard on
// the one firing thread: once each, never early, key order, the cancel guarantee, and a
// stop racing every shard.
import CMetronome
import Glibc
import Synchronization
import Testing

extension CoreContractTests {
    @Suite(.serialized, .tags(.realTime))
    struct Shards {
        static let shards: UInt32 = 4

        /// The shard an id names: the bits above the slot index (mtr_internal.h).
        static func shard(of id: mtr_timer_id) -> UInt32 { UInt32(truncatingIfNeeded: id) >> 26 }

        /// Runs `body` on `threads` threads at once, each given its number.
        static func onThreads(_ threads: Int, _ body: @escaping @Sendable (Int) -> Void) throws {
            let workers = try (0..<threads).map { k in try PosixThread.spawn { body(k) } }
            workers.forEach { $0.join() }
        }

        /// Threads take shards in turn, and each thread's timers stay in its shard; any
        /// thread can then arm, move, cancel and destroy them.
        @Test func eachThreadsTimersLiveInItsShard() throws {
            let engine = try Engine(shards: Self.shards)
            // One thread after another, so that they take consecutive turns.
            var byThread: [[Probe]] = []
            for _ in 0..<8 {
                let made = Monitor([Probe]())
                try PosixThread.spawn { made.update { $0 = (try? engine.makeTimers(3)) ?? [] } }.join()
                byThread.append(made.read { $0 })
            }
            #expect(byThread.allSatisfy { $0.count == 3 })
            for probes in byThread {
                #expect(Set(probes.map { Self.shard(of: $0.id) }).count == 1, "one thread's timers in two shards")
            }
            let used = Set(byThread.flatMap { $0.map { Self.shard(of: $0.id) } })
            #expect(used.allSatisfy { $0 < Self.shards })
            #expect(used.count >= 2, "eight threads in one shard")

            // This thread operates on every shard's timers.
            let probes = byThread.flatMap { $0 }
            let deadline = Time.monotonic() + 5 * Time.ms
            for probe in probes {
                #expect(probe.armOnce(at: Time.monotonic() + Time.s) == 0)
                #expect(probe.move(at: deadline) == 0)
            }
            #expect(engine.counters.armed == UInt64(probes.count))
            #expect(engine.waitFirings(probes.count))
            #expect(engine.firings.allSatisfy { $0.fired >= deadline })
            for probe in probes.prefix(4) {
                #expect(probe.armOnce(at: Time.monotonic() + Time.s) == 0)
                #expect(probe.cancel() == 0)
                #expect(probe.destroy() == 0)
                expectStale(probe)
            }
            #expect(engine.counters.timers == UInt64(probes.count - 4))
            #expect(engine.counters.armed == 0)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// The most shards an engine takes, with more threads than shards: every thread's
        /// timer fires once, never early, and the shards' tickets wrap around.
        @Test func theMostShardsServeMoreThreadsThanShards() throws {
            let shards = UInt32(MTR_SHARDS_MAX)
            let engine = try Engine(shards: shards)
            var probes: [Probe] = []
            for _ in 0..<(Int(shards) + 6) {
                let made = Monitor([Probe]())
                try PosixThread.spawn { made.update { $0 = (try? engine.makeTimers(1)) ?? [] } }.join()
                probes += made.read { $0 }
            }
            try #require(probes.count == Int(shards) + 6)
            #expect(probes.allSatisfy { Self.shard(of: $0.id) < shards })
            #expect(Set(probes.map { Self.shard(of: $0.id) }).count > Int(shards) / 2, "threads did not spread")
            let deadline = Time.monotonic() + 10 * Time.ms
            for probe in probes { try #require(probe.armOnce(at: deadline) == 0) }
            #expect(engine.waitFirings(probes.count))
            #expect(!engine.log.wait(timeoutNs: 20 * Time.ms) { $0.firings.count > probes.count })
            #expect(engine.firings.allSatisfy { $0.fired >= deadline })
            #expect(Set(engine.firings.map(\.probe)).count == probes.count)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// Ids naming a shard the engine does not have, or a slot its shard never handed
        /// out, are refused by every call.
        @Test func idsOfMissingShardsAreRefused() throws {
            let engine = try Engine(shards: Self.shards)
            let live = try engine.makeTimer()
            let generation = live.id >> 32
            let slot = UInt64(UInt32(truncatingIfNeeded: live.id)) & ((1 << 26) - 1)
            let far = Time.monotonic() + 3_600 * Time.s
            var ids: [mtr_timer_id] = []
            for shard in UInt64(Self.shards)..<64 { ids.append(generation << 32 | shard << 26 | slot) }
            for shard in 0..<UInt64(Self.shards) where shard != UInt64(Self.shard(of: live.id)) {
                ids.append(generation << 32 | shard << 26 | slot)
            }
            ids.append(generation << 32 | UInt64(Self.shard(of: live.id)) << 26 | (slot + 1))
            for id in ids {
                #expect(mtr_timer_arm_once(engine.handle, id, .MTR_CLOCK_MONOTONIC, far, 0) == EINVAL, "id \(id)")
                var moved: mtr_timer_id = 0
                #expect(mtr_timer_move(engine.handle, id, .MTR_CLOCK_MONOTONIC, far, 0, 0, &moved) == EINVAL)
                #expect(mtr_timer_cancel(engine.handle, id) == EINVAL)
                #expect(mtr_timer_cancel_sync(engine.handle, id) == EINVAL)
                #expect(mtr_timer_destroy(engine.handle, id) == EINVAL)
            }
            #expect(engine.counters.timers == 1)
            #expect(live.armOnce(at: far) == 0)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// Four threads each arm 500 one-shots at random within 40 ms, some at equal
        /// deadlines: every one fires once, never early, the counters add up over the
        /// shards, and each shard fires in key order (deadline, then arm order).
        @Test func everyShardFiresItsTimersOnceNeverEarlyInOrder() throws {
            try retryingSpoiledTrials(upTo: 3) {
                let engine = try Engine(shards: Self.shards, expectedTimers: 2_000)
                // Time to make and arm them all first: one armed after its deadline fires at
                // once, after later ones (a ThreadSanitizer run once overran a 20 ms lead).
                let start = Time.monotonic() + (Bounds.sanitized ? 500 : 100) * Time.ms
                let made = Monitor([(probe: Probe, deadline: Int64, thread: Int)]())
                try Self.onThreads(4) { k in
                    var random = SplitMix64(seed: 0x5AAD + UInt64(k))
                    guard let probes = try? engine.makeTimers(500) else { return }
                    var armed: [(probe: Probe, deadline: Int64, thread: Int)] = []
                    for probe in probes {
                        // Every third on a whole millisecond, so that equal deadlines meet.
                        let offset = random.next(below: 40 * Time.ms)
                        let deadline = start + (armed.count % 3 == 0 ? offset / Time.ms * Time.ms : offset)
                        if probe.armOnce(at: deadline) == 0 { armed.append((probe, deadline, k)) }
                    }
                    made.update { $0 += armed }
                }
                let armed = made.read { $0 }
                try #require(armed.count == 2_000)
                if Time.monotonic() >= start { return .spoiled("arming overran the lead") }
                #expect(engine.waitFirings(2_000))
                #expect(!engine.log.wait(timeoutNs: 20 * Time.ms) { $0.firings.count > 2_000 })
                #expect(armed.allSatisfy { $0.probe.fires.load(ordering: .relaxed) == 1 })
                let byProbe = Dictionary(uniqueKeysWithValues: armed.map { ($0.probe.index, $0) })
                let firings = engine.firings
                #expect(firings.allSatisfy { $0.fired >= byProbe[$0.probe]!.deadline }, "a timer fired early")
                for shard in 0..<Self.shards {
                    let mine = firings.filter { Self.shard(of: $0.timer) == shard }
                    let keys = mine.map { byProbe[$0.probe]!.deadline }
                    #expect(keys == keys.sorted(), "shard \(shard) fired out of deadline order")
                    // Equal deadlines from one thread, which armed its timers in probe order.
                    for (a, b) in zip(mine, mine.dropFirst()) {
                        let (x, y) = (byProbe[a.probe]!, byProbe[b.probe]!)
                        if x.deadline == y.deadline && x.thread == y.thread {
                            #expect(a.probe < b.probe, "shard \(shard): equal deadlines out of arm order")
                        }
                    }
                }
                let counters = engine.counters
                #expect(counters.fired == 2_000 && counters.timers == 2_000 && counters.armed == 0)
                engine.destroyAndExpectAllReleasedOnce()
                return .counted
            }
        }

        /// Two timers of two shards due at one instant: one wake-up fires both. The other
        /// shard's timerfd, expired too, is then stale and wakes nobody.
        @Test func aWakeupServesEveryShard() throws {
            let engine = try Engine(shards: Self.shards)
            var probes: [Probe] = []
            // Threads in turn, until two timers live in different shards.
            for _ in 0..<8 where Set(probes.map { Self.shard(of: $0.id) }).count < 2 {
                let made = Monitor([Probe]())
                try PosixThread.spawn { made.update { $0 = (try? engine.makeTimers(1)) ?? [] } }.join()
                probes += made.read { $0 }
            }
            let pair = [probes.first!, probes.first { Self.shard(of: $0.id) != Self.shard(of: probes[0].id) }!]
            let deadline = Time.monotonic() + 20 * Time.ms
            for probe in pair { try #require(probe.armOnce(at: deadline) == 0) }
            #expect(engine.waitFirings(2))
            #expect(engine.firings.allSatisfy { $0.fired >= deadline })
            #expect(!engine.log.wait(timeoutNs: 20 * Time.ms) { $0.firings.count > 2 })
            let counters = engine.counters
            #expect(counters.wakeups == 1, "\(counters.wakeups) wake-ups for one instant")
            #expect(counters.coalesced == 1)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// Four threads each cancel repeating timers at random points of their period, at
        /// once: no firing is committed after a cancel returns.
        @Test func cancelGuaranteeHoldsWithAThreadOnEveryShard() throws {
            let engine = try Engine(shards: Self.shards)
            let period = 200 * Time.us
            let cancels = Monitor([Int: Int64]())
            let failures = Atomic<Int>(0)
            try Self.onThreads(4) { k in
                var random = SplitMix64(seed: 0xCA9C + UInt64(k))
                for _ in 0..<20 {
                    guard let probe = try? engine.makeTimer(),
                        probe.armRepeating(start: Time.monotonic() + 100 * Time.us, period: period) == 0
                    else {
                        failures.add(1, ordering: .relaxed)
                        return
                    }
                    Time.spin(Time.ms + random.next(below: period))
                    guard probe.cancel() == 0 else {
                        failures.add(1, ordering: .relaxed)
                        return
                    }
                    let cancelled = Time.monotonic()
                    cancels.update { $0[probe.index] = cancelled }
                }
            }
            #expect(failures.load(ordering: .relaxed) == 0)
            #expect(engine.log.wait { $0.running == 0 })
            let cancelled = cancels.read { $0 }
            #expect(cancelled.count == 80)
            let firings = engine.firings
            #expect(firings.count >= 80, "timers that never fired test nothing")
            let late = firings.filter { $0.fired >= cancelled[$0.probe]! }
            #expect(late.isEmpty, "\(late.count) firings committed after their cancel returned")
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// Creates a timer into `probes`; the errno.
        static func create(on engine: Engine, into probes: inout [Probe]) -> Int32 {
            do {
                probes.append(try engine.makeTimer())
                return 0
            } catch let error as CoreError {
                return error.code
            } catch {
                return -1
            }
        }

        /// Threads create, arm, move, cancel and destroy timers on every shard while the
        /// engine stops: every call is answered, every context released once, and nothing
        /// is armed afterwards.
        @Test func stopRacesOperationsOnEveryShard() throws {
            let engine = try Engine(shards: Self.shards, expectedTimers: 8_000)
            let unexpected = Atomic<Int>(0)
            let ready = Atomic<Int>(0)
            let answers: Set<Int32> = [0, EINVAL, ESHUTDOWN]
            let workers = try (0..<4).map { k in
                try PosixThread.spawn {
                    var random = SplitMix64(seed: 0x570 + UInt64(k))
                    var probes = (try? engine.makeTimers(1_000)) ?? []
                    ready.add(1, ordering: .releasing)
                    for round in 0..<20_000 {
                        if probes.isEmpty { break }
                        let probe = probes[Int(random.next(below: Int64(probes.count)))]
                        let deadline = Time.monotonic() + random.next(below: 20 * Time.ms)
                        let rc: Int32 =
                            switch round % 5 {
                            case 0: probe.armOnce(at: deadline)
                            case 1: probe.move(at: deadline)
                            case 2: probe.cancel()
                            case 3: probe.destroy()
                            default: Self.create(on: engine, into: &probes)
                            }
                        if !answers.contains(rc) { unexpected.add(1, ordering: .relaxed) }
                    }
                }
            }
            while ready.load(ordering: .acquiring) < 4 { Time.sleep(100 * Time.us) }
            Time.sleep(2 * Time.ms)
            engine.stop()
            workers.forEach { $0.join() }
            #expect(unexpected.load(ordering: .relaxed) == 0)
            let counters = engine.counters
            #expect(counters.armed == 0 && counters.timers == 0 && counters.memory_bytes == 0)
            for probe in engine.allProbes.prefix(100) {
                #expect(probe.armOnce(at: Time.monotonic()) != 0, "a timer armed after the stop")
            }
            engine.destroyAndExpectAllReleasedOnce()
        }
    }
}
#endif
