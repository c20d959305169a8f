// One firing thread serves every clock and shard of its engine: a timer that outruns its
// period must not keep it from the others, and a spin for one deadline must end when
// another clock or shard has a timer due first.
import CMetronome
import Glibc
import Testing

extension CoreContractTests {
    @Suite(.serialized, .tags(.realTime))
    struct Fairness {
        /// Where the other timer lives, beside the one that keeps the firing thread busy.
        enum Neighbour: Sendable, CaseIterable {
            /// The same shard, another clock's heap and timerfd.
            case otherClock
            /// Another shard, the same clock.
            case otherShard
        }

        static func engine(for neighbour: Neighbour, spinNs: Int64 = 0) throws -> Engine {
            try Engine(spinNs: spinNs, shards: neighbour == .otherShard ? 2 : 1)
        }

        static func clock(of neighbour: Neighbour) -> mtr_clock_id {
            neighbour == .otherClock ? .MTR_CLOCK_BOOTTIME : .MTR_CLOCK_MONOTONIC
        }

        /// A timer for `neighbour`'s place: made by the calling thread for another clock, or
        /// by a new thread whose shard differs from `mine`'s (threads take shards in turn).
        static func neighbour(
            _ neighbour: Neighbour, of mine: Probe, on engine: Engine, action: (@Sendable (Callback) -> Void)? = nil
        ) throws -> Probe {
            guard neighbour == .otherShard else { return try engine.makeTimer(action) }
            let made = Monitor<Probe?>(nil)
            for _ in 0..<8 {
                let thread = try PosixThread.spawn {
                    let probe = try? engine.makeTimer(action)
                    made.update { $0 = probe }
                }
                thread.join()
                if let probe = made.read({ $0 }), shard(of: probe.id) != shard(of: mine.id) { return probe }
            }
            throw CoreError(call: "mtr_timer_create in another shard", code: EAGAIN)
        }

        static func shard(of id: mtr_timer_id) -> UInt32 { UInt32(truncatingIfNeeded: id) >> 26 }

        /// A repeating timer whose callback runs three times its period keeps the firing
        /// thread busy; a one-shot on another clock or shard still fires, while the busy
        /// timer goes on, never early.
        @Test(.timeLimit(.minutes(1)), arguments: Neighbour.allCases)
        func aTimerThatOutrunsItsPeriodStarvesNoOtherClockOrShard(_ neighbour: Neighbour) throws {
            let engine = try Self.engine(for: neighbour)
            let busy = try engine.makeTimer { _ in Time.spin(3 * Time.ms) }
            let other = try Self.neighbour(neighbour, of: busy, on: engine)
            try #require(busy.armRepeating(start: Time.monotonic(), period: Time.ms) == 0)
            // The busy timer is running flat out before the other is armed.
            try #require(engine.log.wait { log in log.firings.count { $0.probe == busy.index } >= 5 })

            let clock = Self.clock(of: neighbour)
            try #require(other.armOnce(clock, at: Time.now(clock) + 20 * Time.ms) == 0)
            let fired = engine.log.wait { log in log.firings.contains { $0.probe == other.index } }
            #expect(fired, "the timer beside the busy one never fired")
            #expect(busy.fires.load(ordering: .relaxed) > 5 && engine.counters.armed >= 1)
            _ = busy.cancelSync()
            expectNeverEarly(engine.firings)
            engine.destroy()
            engine.expectAllReleasedOnce()
        }

        /// The firing thread spins for a deadline (a 1 ms spin window) while a timer on
        /// another clock or shard falls due first: the spin ends and that timer fires before
        /// the spun-for deadline. Up to five trials; a trial in which the host stalled the
        /// firing thread past both deadlines shows nothing either way.
        @Test(.timeLimit(.minutes(1)), arguments: Neighbour.allCases)
        func anEarlierTimerOnAnotherClockOrShardEndsASpin(_ neighbour: Neighbour) throws {
            let engine = try Self.engine(for: neighbour, spinNs: Int64(MTR_SPIN_MAX_NS))
            let spun = try engine.makeTimer()
            let early = try Self.neighbour(neighbour, of: spun, on: engine)
            let clock = Self.clock(of: neighbour)
            var firstInTime = 0
            for trial in 0..<5 {
                // The spin begins at base, a spin window before the spun-for deadline.
                let base = Time.monotonic() + 30 * Time.ms
                let spunDeadline = base + Int64(MTR_SPIN_MAX_NS)
                let offset = Time.now(clock) - Time.monotonic()
                try #require(spun.armOnce(at: spunDeadline) == 0)
                try #require(early.armOnce(clock, at: base + 400 * Time.us + offset) == 0)
                try #require(engine.waitFirings(2 * (trial + 1)))
                let firings = engine.firings.suffix(2)
                guard let earlyFiring = firings.first(where: { $0.probe == early.index }) else { continue }
                if earlyFiring.startNs < spunDeadline { firstInTime += 1 }
            }
            #expect(firstInTime > 0, "the earlier timer waited out the spin in every trial")
            expectNeverEarly(engine.firings)
            engine.destroy()
        }
    }
}
