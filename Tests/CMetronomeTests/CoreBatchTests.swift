#if Engine
// The burst batch: when a large share of the armed timers is due at once, the firing
// thread takes them out of the heap in one pass, sorts them and drains them in order
// (mtr_batch.c). A gate timer holds the firing thread until the whole burst is due, so
// these tests go through the batch for certain, and check that it does.
import CMetronome
import Glibc
import Testing

extension CoreContractTests {
    @Suite(.serialized, .tags(.realTime))
    struct Batch {
        static let burst = 20_000

        /// An engine with `burst` timers whose firing thread is held in a gate timer's
        /// callback until the returned gate opens: whatever is armed meanwhile, however
        /// far in the past, is due all at once when it does.
        static func heldEngine() throws -> (Engine, [Probe], Gate) {
            let engine = try Engine(expectedTimers: Self.burst + 1)
            let probes = try engine.makeTimers(Self.burst)
            let release = Gate()
            let gate = try engine.makeTimer { _ in _ = release.pass() }
            try #require(gate.armOnce(at: Time.monotonic()) == 0)
            try #require(engine.waitFirings(1))
            return (engine, probes, release)
        }

        /// A burst fires through the batch: every timer once, at its own deadline, never
        /// early, in nondecreasing deadline order, with `armed` back to zero and the
        /// memory the burst took given back.
        @Test func aBurstDrainsOnceEachInDeadlineOrder() throws {
            // Held before the burst is armed, not by a gate due just before it: a firing
            // thread that woke late would take the first deadlines one by one.
            let (engine, probes, release) = try Self.heldEngine()
            let heldBefore = engine.counters.memory_bytes
            var generator = SplitMix64(seed: 0xB0857)
            let window = 2 * Time.ms
            let base = Time.monotonic() + Time.ms
            let deadlines = probes.map { _ in base + Int64.random(in: 1..<window, using: &generator) }
            for (probe, deadline) in zip(probes, deadlines) {
                try #require(probe.armOnce(at: deadline) == 0)
            }
            while Time.monotonic() < base + window { Time.sleep(Time.ms) }
            release.open()

            #expect(engine.waitFirings(Self.burst + 1))
            #expect(!engine.log.wait(timeoutNs: 20 * Time.ms) { $0.firings.count > Self.burst + 1 })
            let firings = engine.firings.filter { $0.probe < Self.burst }
            #expect(firings.count == Self.burst)
            #expect(Set(firings.map(\.probe)).count == Self.burst, "a timer fired twice or never")
            #expect(firings.allSatisfy { $0.scheduled == deadlines[$0.probe] })
            expectNeverEarly(firings)
            let scheduled = firings.map(\.scheduled)
            #expect(scheduled == scheduled.sorted(), "the batch fired out of deadline order")
            let counters = engine.counters
            #expect(counters.batched >= UInt64(Self.burst - 1), "the burst did not go through the batch")
            #expect(counters.armed == 0)
            // The heap kept the batch's room while it drained, and gives it back after (the
            // firing thread, once the last callback has returned).
            #expect(eventually { engine.counters.memory_bytes == heldBefore }, "memory kept after the burst")
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// While a batch drains, the first callback cancels, destroys and re-arms timers that
        /// sit in the batch, and arms a new timer that is already due. Cancelled and
        /// destroyed timers never fire; a re-armed one fires once, at its new deadline; the
        /// new timer, armed during the wake-up, fires at the next one, right after the
        /// batch; `armed` counts what is left.
        @Test func callbacksReachTimersInTheBatch() throws {
            // Held while the burst is armed, not by a gate due just before it: a firing
            // thread that woke late would batch only the deadlines due by then, and the
            // newcomer, due at once and at the heap's top, would end the pass ahead of the
            // rest, which then fire after it at the next wake-up.
            let (engine, probes, release) = try Self.heldEngine()
            var generator = SplitMix64(seed: 0xCA7C4)
            // What the first callback did, for the checks below.
            struct Edits {
                var base: Int64 = 0
                var rearmedAt: Int64 = 0
                var armedSeen: UInt64 = 0
                var newcomer: Probe?
            }
            let edits = Monitor(Edits())
            // Probe i: i % 4 == 1 cancelled, == 2 destroyed, == 3 re-armed, == 0 left alone.
            // Weak: the fixture holds its probes, and a probe holds its action.
            let first = try engine.makeTimer { [weak engine] callback in
                let rearmedAt = Time.monotonic() + 50 * Time.ms
                for probe in probes {
                    switch probe.index % 4 {
                    case 1: _ = probe.cancel()
                    case 2: _ = probe.destroy()
                    case 3: _ = probe.armOnce(at: rearmedAt)
                    default: break
                    }
                }
                // Due at the burst's base: before every burst deadline still in the batch.
                let newcomer = try? engine?.makeTimer()
                _ = newcomer?.armOnce(at: edits.read { $0.base })
                var counters = mtr_counters()
                mtr_engine_get_counters(callback.engine.handle, &counters)
                edits.update {
                    $0.rearmedAt = rearmedAt
                    $0.armedSeen = counters.armed
                    $0.newcomer = newcomer
                }
            }
            let window = 2 * Time.ms
            let base = Time.monotonic() + Time.ms
            let deadlines = probes.map { _ in base + Int64.random(in: 1..<window, using: &generator) }
            for (probe, deadline) in zip(probes, deadlines) {
                try #require(probe.armOnce(at: deadline) == 0)
            }
            edits.update { $0.base = base }
            try #require(first.armOnce(at: base) == 0)  // the burst's smallest key
            while Time.monotonic() < base + window { Time.sleep(Time.ms) }
            release.open()

            let fireOnce = Self.burst / 4
            let rearmed = Self.burst / 4
            // first + newcomer + untouched + re-armed, and the gate.
            let expected = 2 + fireOnce + rearmed + 1
            #expect(engine.waitFirings(expected))
            #expect(!engine.log.wait(timeoutNs: 100 * Time.ms) { $0.firings.count > expected })
            let done = edits.read { $0 }
            let newcomerIndex = try #require(done.newcomer?.index)
            // Untouched and re-armed timers, plus the newcomer, were armed after the edits.
            #expect(done.armedSeen == UInt64(fireOnce + rearmed + 1))

            let firings = engine.firings
            let byProbe = Dictionary(grouping: firings, by: \.probe)
            #expect(byProbe.values.allSatisfy { $0.count == 1 }, "a timer fired twice")
            for probe in probes {
                let fired = byProbe[probe.index]
                switch probe.index % 4 {
                case 1, 2: #expect(fired == nil, "probe \(probe.index) fired after its cancel or destroy")
                case 3: #expect(fired?.first?.scheduled == done.rearmedAt, "probe \(probe.index)")
                default: #expect(fired?.first?.scheduled == deadlines[probe.index], "probe \(probe.index)")
                }
            }
            expectNeverEarly(firings)
            // A timer armed during a wake-up waits for the next one, however early its key:
            // the newcomer fires as soon as the batch has drained, before the re-armed timers.
            let order = firings.map(\.probe).filter { $0 < Self.burst || $0 == newcomerIndex || $0 == first.index }
            #expect(order.first == first.index)
            #expect(order.firstIndex(of: newcomerIndex) == 1 + fireOnce)
            #expect(engine.counters.batched > 0, "the burst did not go through the batch")
            #expect(engine.counters.armed == 0)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// Deadlines from up to an hour ago until now, a fifth of them equal, armed in random
        /// order while a gate holds the firing thread: the batch fires them by deadline and,
        /// among equal deadlines, in the order they were armed.
        @Test func pastDeadlinesAndTiesDrainByDeadlineThenArmOrder() throws {
            let (engine, probes, release) = try Self.heldEngine()
            var generator = SplitMix64(seed: 0x71E5)
            let now = Time.monotonic()
            let span = min(3_600 * Time.s, now / 2)  // deadlines may not be negative
            let tie = now - span / 2
            var armOrder: [Int: Int] = [:]
            var deadlines: [Int: Int64] = [:]
            for (position, probe) in probes.shuffled(using: &generator).enumerated() {
                let deadline =
                    Int.random(in: 0..<5, using: &generator) == 0
                    ? tie : now - Int64.random(in: 0..<span, using: &generator)
                armOrder[probe.index] = position
                deadlines[probe.index] = deadline
                try #require(probe.armOnce(at: deadline) == 0)
            }
            release.open()

            #expect(engine.waitFirings(Self.burst + 1))
            let fired = engine.firings.dropFirst().map(\.probe)
            let expected = probes.map(\.index).sorted {
                (deadlines[$0]!, armOrder[$0]!) < (deadlines[$1]!, armOrder[$1]!)
            }
            #expect(fired == expected, "the batch broke deadline or arm order")
            #expect(engine.counters.batched >= UInt64(Self.burst - 1), "the burst did not go through the batch")
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// Another thread cancels and re-arms burst timers while the batch drains. A
        /// cancelled timer's firing, if any, was committed before its cancel returned; a
        /// re-armed one fires at most once for its old deadline (committed before the
        /// re-arm returned) and once for its new one; the rest fire once each.
        @Test func anotherThreadCancelsAndReArmsDuringTheBatch() throws {
            let (engine, probes, release) = try Self.heldEngine()
            var generator = SplitMix64(seed: 0x7E4D)
            let now = Time.monotonic()
            let deadlines = probes.map { _ in now - Int64.random(in: 0..<Time.s, using: &generator) }
            for (probe, deadline) in zip(probes, deadlines) {
                try #require(probe.armOnce(at: deadline) == 0)
            }
            let later = now + 200 * Time.ms

            // Probe i: i % 3 == 1 cancelled, == 2 re-armed; returned when each call did.
            // The gate opens first, so the edits race the take and the drain.
            let returned = Monitor([Int: Int64]())
            release.open()
            let editor = try PosixThread.spawn {
                for probe in probes.reversed() where probe.index % 3 != 0 {
                    let rc = probe.index % 3 == 1 ? probe.cancel() : probe.armOnce(at: later)
                    let at = Time.monotonic()
                    returned.update { $0[probe.index] = rc == 0 ? at : -1 }
                }
            }
            editor.join()
            // Everything has fired once nothing is armed and no callback runs. (A log
            // predicate counting firings would cost O(n) on every one of them.)
            let giveUp = Time.monotonic() + Bounds.patienceNs
            while engine.counters.armed > 0 && Time.monotonic() < giveUp { Time.sleep(Time.ms) }
            #expect(engine.counters.armed == 0)
            #expect(engine.log.wait { $0.running == 0 })

            let done = returned.read { $0 }
            #expect(done.values.allSatisfy { $0 >= 0 }, "a cancel or re-arm failed")
            let byProbe = Dictionary(grouping: engine.firings.filter { $0.probe < Self.burst }, by: \.probe)
            var wrong: [String] = []
            for probe in probes {
                let fired = byProbe[probe.index] ?? []
                let old = fired.filter { $0.scheduled == deadlines[probe.index] }
                switch probe.index % 3 {
                case 1:
                    if fired.count > 1 || old.contains(where: { $0.fired >= done[probe.index]! }) {
                        wrong.append("cancelled \(probe.index): \(fired)")
                    }
                case 2:
                    let new = fired.filter { $0.scheduled == later }
                    if new.count != 1 || old.count > 1 || old.contains(where: { $0.fired >= done[probe.index]! }) {
                        wrong.append("re-armed \(probe.index): \(fired)")
                    }
                default:
                    if fired.count != 1 || old.count != 1 { wrong.append("untouched \(probe.index): \(fired)") }
                }
            }
            #expect(wrong.isEmpty, "\(wrong.count) wrong, first: \(wrong.prefix(3))")
            expectNeverEarly(engine.firings)
            #expect(engine.counters.batched > 0, "the burst did not go through the batch")
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// Putting a repeating timer back after its firing allocates nothing, so it cannot
        /// fail for want of memory: the heap keeps room for every entry out in the batch.
        /// A burst of repeating timers drains through the batch between two watchers, the
        /// first and the last of its deadlines, and the engine holds the same memory at
        /// both; afterwards every repeating timer is armed again.
        @Test func repeatingTimersGoBackFromABatchWithoutAllocating() throws {
            let (engine, probes, release) = try Self.heldEngine()
            let held = Monitor([UInt64]())
            let watch: @Sendable (Callback) -> Void = { callback in
                var counters = mtr_counters()
                mtr_engine_get_counters(callback.engine.handle, &counters)
                held.update { $0.append(counters.memory_bytes) }
            }
            let first = try engine.makeTimer(watch)
            let last = try engine.makeTimer(watch)
            let now = Time.monotonic()
            try #require(first.armOnce(at: now - 2 * Time.ms) == 0)
            for probe in probes {
                try #require(probe.armRepeating(start: now - Time.ms, period: 10 * Time.s) == 0)
            }
            try #require(last.armOnce(at: now) == 0)
            release.open()

            #expect(held.wait { $0.count == 2 })
            let bytes = held.read { $0 }
            #expect(bytes.count == 2 && bytes[0] == bytes[1], "memory during the batch: \(bytes)")
            let counters = engine.counters
            #expect(counters.batched >= UInt64(Self.burst), "the burst did not go through the batch")
            #expect(counters.armed == UInt64(Self.burst), "a repeating timer did not go back")
            #expect(probes.allSatisfy { $0.fires.load(ordering: .relaxed) == 1 })
            engine.destroyAndExpectAllReleasedOnce()
        }
    }
}
#endif
