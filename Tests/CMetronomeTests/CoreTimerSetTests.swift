#if Engine
// The timer set at scale: 100,000 one-shots fire once each, never early, in key order;
// and a randomized invariant test of arm/cancel/re-arm/destroy against a model.
import CMetronome
import Glibc
import Testing

extension CoreContractTests {
    @Suite(.serialized, .tags(.realTime))
    struct TimerSet {
        /// 100,000 one-shots with random deadlines (leeway 0): each fires exactly once, never
        /// early, and in nondecreasing deadline order, since with leeway 0 the heap key is
        /// the deadline.
        @Test func hundredThousandOneShotsFireOnceInOrder() throws {
            try retryingSpoiledTrials(upTo: 3) {
                let count = 100_000
                let engine = try Engine(expectedTimers: count)
                var generator = SplitMix64(seed: 0x100_000)
                let created = Time.monotonic()
                let probes = try engine.makeTimers(count)
                // Arming must end before the first deadline, or a late-armed timer could
                // legitimately fire after a later deadline.
                let lead = Bounds.sanitized ? 2_000 * Time.ms : 500 * Time.ms
                let span = 1_200 * Time.ms
                let offsets = (0..<count).map { _ in Int64.random(in: 0..<span, using: &generator) }
                let base = Time.monotonic() + lead
                var refused = 0
                for (probe, offset) in zip(probes, offsets) where probe.armOnce(at: base + offset) != 0 {
                    refused += 1
                }
                let armed = Time.monotonic()
                let deadlines = offsets.map { base + $0 }
                try #require(refused == 0)
                // Deadlines after the arming ended fire in key order among all timers; on a
                // loaded machine arming may overrun the lead, and earlier ones are not ordered.
                let ordered = deadlines.lazy.filter { $0 >= armed }.count
                if ordered < count / 2 { return .spoiled("arming overran the lead by \((armed - base) / Time.ms) ms") }
                // Each timer is armed or has fired, in one snapshot, however late the arming ran.
                let afterArming = engine.counters
                #expect(afterArming.armed + afterArming.fired == UInt64(count))

                #expect(engine.waitFirings(count, timeoutNs: lead + span + 20 * Time.s))
                #expect(!engine.log.wait(timeoutNs: 20 * Time.ms) { $0.firings.count > count })
                let firings = engine.firings
                #expect(firings.count == count)
                // One pass over the firings (this runs unoptimized): exactly once, the armed
                // deadline, never early, nondecreasing deadlines.
                var seen = [Bool](repeating: false, count: count)
                var twice = 0
                var wrongDeadline = 0
                var early = 0
                var outOfOrder = 0
                var maxLateness: Int64 = 0
                var previous = Int64.min
                for firing in firings {
                    if seen[firing.probe] { twice += 1 }
                    seen[firing.probe] = true
                    if firing.scheduled != deadlines[firing.probe] { wrongDeadline += 1 }
                    if firing.fired < firing.scheduled || firing.clockNs < firing.scheduled { early += 1 }
                    if firing.scheduled >= armed {
                        if firing.scheduled < previous { outOfOrder += 1 }
                        previous = firing.scheduled
                    }
                    maxLateness = max(maxLateness, firing.fired - firing.scheduled)
                }
                #expect(twice == 0, "\(twice) timers fired more than once")
                #expect(!seen.contains(false), "\(seen.lazy.filter { !$0 }.count) timers never fired")
                #expect(wrongDeadline == 0, "\(wrongDeadline) firings reported another deadline")
                #expect(early == 0, "\(early) firings were early")
                #expect(outOfOrder == 0, "\(outOfOrder) firings came before an earlier deadline")
                let counters = engine.counters
                #expect(counters.fired == UInt64(count))
                #expect(counters.armed == 0)
                print(
                    "100k one-shots: created in \((base - lead - created) / Time.ms) ms, armed in \((armed - base + lead) / Time.ms) ms; "
                        + "\(counters.wakeups) wake-ups; max lateness \(maxLateness / Time.us) µs")
                engine.destroyAndExpectAllReleasedOnce()
                return .counted
            }
        }

        /// 20,000 random create/arm/re-arm/cancel/cancel_sync/destroy operations (and stale
        /// ids) on far-future deadlines, checked against a model: the armed and live counts
        /// agree throughout. Then every timer the model holds armed is re-armed to fire soon,
        /// and exactly those fire, once each, in deadline order per clock.
        @Test(arguments: [UInt64(0xA11CE), 0xB0B])
        func randomOperationsAgreeWithAModel(seed: UInt64) throws {
            let engine = try Engine()
            var generator = SplitMix64(seed: seed)
            var live: [Probe] = []
            var armed: [Int: Bool] = [:]  // by probe index, for live timers
            var dead: [Probe] = []
            var unexpected: [String] = []

            func expectRC(_ rc: Int32, _ want: Int32, _ what: String) {
                if rc != want && unexpected.count < 10 { unexpected.append("\(what): \(rc), want \(want)") }
            }
            func far(_ clock: mtr_clock_id) -> Int64 {
                Time.now(clock) + 3_600 * Time.s + Int64.random(in: 0..<3_600 * Time.s, using: &generator)
            }

            var checks = 0
            for op in 0..<20_000 {
                let roll = Int.random(in: 0..<100, using: &generator)
                if live.isEmpty || (roll < 20 && live.count < 3_000) {
                    live.append(try engine.makeTimer())
                    armed[live.last!.index] = false
                    continue
                }
                let pick = Int.random(in: 0..<live.count, using: &generator)
                let probe = live[pick]
                let clock = mtr_clock_id.all.randomElement(using: &generator)!
                switch roll {
                case 0..<45:
                    let leeway = Int64.random(in: 0..<Time.s, using: &generator)
                    expectRC(probe.armOnce(clock, at: far(clock), leeway: leeway), 0, "arm_once")
                    armed[probe.index] = true
                case 45..<57:
                    let period = Int64.random(in: 1..<10 * Time.s, using: &generator)
                    let leeway = Int64.random(in: 0...period, using: &generator)
                    expectRC(probe.armRepeating(clock, start: far(clock), period: period, leeway: leeway), 0, "arm_rep")
                    armed[probe.index] = true
                case 57..<72:
                    expectRC(probe.cancel(), 0, "cancel")
                    armed[probe.index] = false
                case 72..<77:
                    expectRC(probe.cancelSync(), 0, "cancel_sync")
                    armed[probe.index] = false
                case 77..<90:
                    expectRC(probe.destroy(), 0, "destroy")
                    armed[probe.index] = nil
                    live.swapAt(pick, live.count - 1)
                    dead.append(live.removeLast())
                default:
                    guard let stale = dead.randomElement(using: &generator) else { continue }
                    switch Int.random(in: 0..<4, using: &generator) {
                    case 0: expectRC(stale.armOnce(at: far(.MTR_CLOCK_MONOTONIC)), EINVAL, "stale arm")
                    case 1: expectRC(stale.cancel(), EINVAL, "stale cancel")
                    case 2: expectRC(stale.cancelSync(), EINVAL, "stale cancel_sync")
                    default: expectRC(stale.destroy(), EINVAL, "stale destroy")
                    }
                }
                if op % 1_000 == 0 {
                    checks += 1
                    let counters = engine.counters
                    let modelArmed = armed.values.filter { $0 }.count
                    if counters.armed != UInt64(modelArmed) || counters.timers != UInt64(live.count) {
                        unexpected.append(
                            "op \(op): armed \(counters.armed) vs \(modelArmed), timers \(counters.timers) vs \(live.count)"
                        )
                    }
                }
            }
            #expect(unexpected.isEmpty, "seed \(seed): \(unexpected)")
            let counters = engine.counters
            let armedSet = live.filter { armed[$0.index] == true }
            #expect(counters.armed == UInt64(armedSet.count), "seed \(seed)")
            #expect(counters.timers == UInt64(live.count), "seed \(seed)")
            #expect(engine.firings.isEmpty)
            #expect(dead.allSatisfy { $0.releases.load(ordering: .acquiring) == 1 })

            // Re-arm the armed set, in random order, to fire soon as one-shots.
            var soon: [Int: Int64] = [:]
            for probe in armedSet.shuffled(using: &generator) {
                let clock = mtr_clock_id.all.randomElement(using: &generator)!
                let deadline = Time.now(clock) + 30 * Time.ms + Int64.random(in: 0..<50 * Time.ms, using: &generator)
                soon[probe.index] = deadline
                try #require(probe.armOnce(clock, at: deadline) == 0)
            }
            // Unless re-arming took past the earliest deadline (a slow, sanitized run).
            if Time.monotonic() < soon.values.min() ?? .max {
                #expect(engine.counters.armed == UInt64(armedSet.count))
            }
            #expect(engine.waitFirings(armedSet.count))
            #expect(!engine.log.wait(timeoutNs: 100 * Time.ms) { $0.firings.count > armedSet.count })
            let firings = engine.firings
            #expect(Set(firings.map(\.probe)) == Set(armedSet.map(\.index)), "seed \(seed)")
            #expect(firings.count == armedSet.count)
            #expect(firings.allSatisfy { $0.scheduled == soon[$0.probe] })
            expectNeverEarly(firings)
            for clock in mtr_clock_id.all {
                let mine = firings.filter { $0.clock == clock }.map(\.scheduled)
                #expect(mine == mine.sorted(), "seed \(seed): clock \(clock) fired out of deadline order")
            }
            #expect(engine.counters.armed == 0)
            engine.destroyAndExpectAllReleasedOnce()
        }
    }
}
#endif
