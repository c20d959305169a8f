#if Engine
// What one pass of the firing thread fires: only the timers armed before it began, each at
// most once, the untouched ones of a heap in key order, whether they come from the heap or
// from the burst batch (mtr_fire.c, mtr_batch.c); and it ends, so that the other clocks and
// shards are served within their window plus one pass.
import CMetronome
import Glibc
import Testing

extension CoreContractTests {
    @Suite(.serialized, .tags(.realTime))
    struct Pass {
        /// Bursts of this many timers: each a share of the heap that the batch takes.
        static let burstSize = 1_000
        static let bursts = 10
        /// How far apart the bursts' deadlines are.
        static let gap = 5 * Time.ms

        /// Bursts of timers `gap` apart from `base`, and a timer, due at `base` too, that
        /// re-arms itself whenever it fires: after spinning past the next burst's deadline,
        /// at once, so that its new deadline is due and behind that burst's. Each of its
        /// firings records its wake-up (the engine's wake-ups and clock steps, which only
        /// the firing thread counts), `bursts` firings in all.
        struct Rearming {
            let probes: [Probe]
            let deadlines: [Int64]
            let rearming: Probe
            let wakeUps: Monitor<[UInt64]>
            let base: Int64
        }

        static func armRearming(on engine: Engine) throws -> Rearming {
            let probes = try engine.makeTimers(Self.bursts * Self.burstSize)
            let wakeUps = Monitor([UInt64]())
            let rearming = try engine.makeTimer { callback in
                var counters = mtr_counters()
                mtr_engine_get_counters(callback.engine.handle, &counters)
                let firings = wakeUps.update {
                    $0.append(counters.wakeups + counters.clock_steps)
                    return $0.count
                }
                guard firings < Self.bursts else { return }
                Time.spin(Self.gap + Time.ms)
                _ = callback.probe.armOnce(at: Time.monotonic())
            }
            // Far enough ahead that everything is armed before the first burst is due.
            let base = Time.monotonic() + 300 * Time.ms
            try #require(rearming.armOnce(at: base) == 0)
            let deadlines = probes.indices.map { base + Int64($0 / Self.burstSize) * Self.gap }
            for (probe, deadline) in zip(probes, deadlines) {
                try #require(probe.armOnce(at: deadline) == 0)
            }
            if Time.monotonic() >= base { try Test.cancel("arming took longer than its margin") }
            return Rearming(probes: probes, deadlines: deadlines, rearming: rearming, wakeUps: wakeUps, base: base)
        }

        /// A timer that re-arms itself, due, while bursts keep becoming due: each wake-up
        /// fires it once at most, however many batches the wake-up takes; the bursts fire
        /// once each, in deadline order, through the batch. Taking it into every batch fired
        /// it once per burst in one wake-up.
        @Test func aTimerReArmedDueFiresOncePerWakeUp() throws {
            let engine = try Engine(expectedTimers: Self.bursts * Self.burstSize + 1)
            let armed = try Self.armRearming(on: engine)
            #expect(armed.wakeUps.wait { $0.count == Self.bursts })
            #expect(engine.waitFirings(armed.probes.count + Self.bursts))

            let wakeUps = armed.wakeUps.read { $0 }
            #expect(Set(wakeUps).count == wakeUps.count, "fired twice in one wake-up; wake-ups: \(wakeUps)")
            let firings = engine.firings.filter { $0.probe != armed.rearming.index }
            #expect(firings.count == armed.probes.count)
            #expect(Set(firings.map(\.probe)).count == armed.probes.count, "a timer fired twice or never")
            #expect(firings.map(\.probe) == armed.probes.map(\.index), "the bursts fired out of order")
            #expect(engine.counters.batched > 0, "the bursts did not go through the batch")
            expectNeverEarly(engine.firings)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// The same, with a timer on another clock or shard due among the bursts: it waits
        /// for the pass its deadline fell in and one more at most, so the re-arming timer
        /// fires twice at most between that deadline and its firing. With one endless pass,
        /// it fired every time in between.
        @Test(arguments: Fairness.Neighbour.allCases)
        func aTimerOnAnotherClockOrShardWaitsOnePassAtMost(_ neighbour: Fairness.Neighbour) throws {
            let engine = try Fairness.engine(for: neighbour)
            let armed = try Self.armRearming(on: engine)
            let other = try Fairness.neighbour(neighbour, of: armed.rearming, on: engine)
            let clock = Fairness.clock(of: neighbour)
            // Its clock's reading minus the monotonic one: how to compare the two.
            let offset = Time.now(clock) - Time.monotonic()
            let deadline = armed.base + Self.gap + Self.gap / 2
            if Time.monotonic() >= deadline { try Test.cancel("arming took longer than its margin") }
            try #require(other.armOnce(clock, at: deadline + offset) == 0)
            #expect(armed.wakeUps.wait { $0.count == Self.bursts })
            #expect(engine.waitFirings(armed.probes.count + Self.bursts + 1))

            let firings = engine.firings
            let otherAt = try #require(firings.firstIndex { $0.probe == other.index })
            let between = firings[..<otherAt].filter {
                $0.probe == armed.rearming.index && $0.startNs > deadline
            }
            #expect(
                between.count <= 2,
                "the timer on \(neighbour) waited for \(between.count) firings of the re-arming timer")
            expectNeverEarly(firings)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// A batch is draining when its first callback arms a timer due before every key in
        /// it, so that the newcomer sits at the heap's top until the next wake-up; behind it
        /// in the heap waits a timer moved later before the wake-up, whose new deadline is
        /// due and falls among the batch's. The timers nobody touched during the wake-up
        /// still fire in deadline order: the moved one is not passed by later batch keys.
        @Test func aNewcomerAtTheTopKeepsTheUntouchedInOrder() throws {
            let count = 2_000
            let engine = try Engine(expectedTimers: count + 4)
            let probes = try engine.makeTimers(count)
            let moved = try engine.makeTimer()
            let newcomer = try engine.makeTimer()
            let hold = Gate()
            let gate = try engine.makeTimer { _ in _ = hold.pass() }
            try #require(gate.armOnce(at: Time.monotonic()) == 0)
            try #require(engine.waitFirings(1))

            // Everything below is due when the gate opens.
            let base = Time.monotonic() - 10 * Time.ms
            let first = try engine.makeTimer { _ in _ = newcomer.armOnce(at: base - 5 * Time.us) }
            try #require(first.armOnce(at: base - 20 * Time.us) == 0)
            let deadlines = (0..<count).map { base + Int64($0) * Time.us }
            for (probe, deadline) in zip(probes, deadlines) {
                try #require(probe.armOnce(at: deadline) == 0)
            }
            let movedTo = base + Int64(count / 2) * Time.us + Time.us / 2
            try #require(moved.armOnce(at: base - 10 * Time.us) == 0)
            try #require(moved.armOnce(at: movedTo) == 0)
            hold.open()

            #expect(engine.waitFirings(count + 4))
            let firings = engine.firings
            #expect(firings.count == count + 4, "a timer fired twice")
            let untouched = Set(probes.map(\.index) + [moved.index])
            let scheduled = firings.filter { untouched.contains($0.probe) }.map(\.scheduled)
            #expect(scheduled.count == count + 1)
            let inversions = zip(scheduled, scheduled.dropFirst()).filter { $0 > $1 }.count
            #expect(inversions == 0, "untouched timers fired out of deadline order \(inversions) times")
            #expect(firings.first { $0.probe == moved.index }?.scheduled == movedTo)
            #expect(engine.counters.batched > 0, "the burst did not go through the batch")
            expectNeverEarly(firings)
            engine.destroyAndExpectAllReleasedOnce()
        }
    }
}
#endif
