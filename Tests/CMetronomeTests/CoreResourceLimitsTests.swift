#if Engine
// The C core at the limits of its resources: too few descriptors, arm order and timer
// ids wrapping around, memory given back after a peak, and memory exhausted.
import CMetronome
import Glibc
import Synchronization
import Testing

extension CoreContractTests {
    @Suite(.serialized, .tags(.realTime))
    struct ResourceLimits {
        // MARK: Descriptors

        /// With every count of free descriptors from none up, creation either succeeds or
        /// returns EMFILE, leaving no descriptor open; it never exits the process. Run in a
        /// child, whose descriptor limit can be lowered without touching the test runner.
        @Test(
            .disabled(if: Bounds.threadSanitized, "TSan does not support threads after a multi-threaded fork"),
            arguments: [UInt32(1), 4])
        func creationWithTooFewDescriptorsReturnsEMFILE(shards: UInt32) {
            // Three timerfds per shard, an epoll instance, a pipe and the standby's timerfd.
            let expected = 3 * Int32(shards) + 4
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

        // MARK: Wrap-around

        /// Equal deadlines fire in arm order however many arms happened between them: arm
        /// order is renumbered before it could wrap.
        @Test(arguments: [UInt64(1) << 31, UInt64(3) << 31 + 5, UInt64(5) << 31 + 1])
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
            engine.destroyAndExpectAllReleasedOnce()
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
            engine.destroyAndExpectAllReleasedOnce()
        }

        // MARK: Memory

        /// The memory taken for 100,000 timers is given back once they are destroyed; ids of
        /// the given-back slots stay stale when the array grows over them again.
        @Test func memoryIsGivenBackAfterAPeak() throws {
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
            engine.destroyAndExpectAllReleasedOnce()
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
                    let giveUp = start + Bounds.patienceNs
                    while earlier.count + moved.count < 2, Time.monotonic() < giveUp { Time.sleep(Time.ms) }
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
#endif
