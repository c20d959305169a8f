import Foundation
import Metronome
import MetronomeTesting
import Synchronization
import Testing

@Suite(.serialized)
struct ExpiringValueTests: EngineSuite {
    let engine: TimerEngine

    /// Touched every 5 ms, a value with a 100 ms lifetime never expires; left alone, it
    /// expires once, a lifetime after the last touch. A touch that came a lifetime or more
    /// after the one before (the machine held the test) may find it expired: that trial is
    /// spoiled, counted, and a fresh value takes over.
    @Test(.timeLimit(.minutes(1)))
    func neverExpiresWhileTouched() async throws {
        let lifetime = Duration.milliseconds(100)
        var trials = LoadSpoiledTrials()
        var last: (value: ExpiringValue<String>, expiries: Recorder<TimerInstant>, touched: TimerInstant)?
        for _ in 0..<40 where trials.counted < 30 {
            let expiries = Recorder<TimerInstant>()
            var lastTouch = TimerClock.monotonic.now()
            let value = ExpiringValue("session", lifetime: lifetime, backend: .engine(self.engine)) { _ in
                expiries.append(TimerClock.monotonic.now())
            }
            last = (value, expiries, lastTouch)
            let end = lastTouch.advanced(by: .milliseconds(300))
            while TimerClock.monotonic.now() < end {
                // The touch cadence under test, not a wait for something.
                try await Task.sleep(for: .milliseconds(5))
                let start = TimerClock.monotonic.now()
                let touched = value.touch()
                let finished = TimerClock.monotonic.now()
                #expect(expiries.entries.allSatisfy { $0 >= lastTouch.advanced(by: lifetime) }, "expired early")
                if touched {
                    trials.count()
                    #expect(expiries.count == 0, "expired although touched within its lifetime")
                    lastTouch = start
                    last?.touched = start
                } else {
                    #expect(
                        finished >= lastTouch.advanced(by: lifetime), "expired although touched within its lifetime")
                    trials.spoil("touched \(lastTouch.duration(to: finished)) after the touch before")
                    break
                }
            }
        }
        trials.report()
        let (value, expiries, lastTouch) = try #require(last)
        #expect(expiries.wait(forCount: 1, timeout: .seconds(5)))
        #expect(expiries.entries.count == 1)
        #expect(expiries.entries[0] >= lastTouch.advanced(by: lifetime))
        #expect(value.value == nil)
        #expect(value.isExpired)
        #expect(!value.touch())
    }

    @Test(.timeLimit(.minutes(1)))
    func expiresExactlyOnceWhenLeftAlone() async throws {
        let expiries = Recorder<String>()
        let created = TimerClock.monotonic.now()
        let value = ExpiringValue("token", lifetime: .milliseconds(10), backend: .engine(self.engine)) {
            expiries.append($0)
        }
        #expect(expiries.wait(forCount: 1, timeout: .seconds(5)))
        #expect(TimerClock.monotonic.now() >= created.advanced(by: .milliseconds(10)))
        #expect(expiries.entries == ["token"])
        #expect(!value.touch())
        #expect(value.invalidate() == nil)
        // A timer armed now, due after one more lifetime, has fired: a second expiry, due
        // by then at the latest, would have come first.
        #expect(self.engine.firesPast(.milliseconds(10)))
        #expect(expiries.count == 1)
        #expect(self.engine.counters.armed == 0)
    }

    /// On GCD a value has a set of its own, whose expiry instant is armed as it is.
    @Test(.timeLimit(.minutes(1)))
    func expiresExactlyOnceOnGCD() async throws {
        let expiries = Recorder<String>()
        let created = TimerClock.monotonic.now()
        let value = ExpiringValue("token", lifetime: .milliseconds(10), backend: .dispatch) { expiries.append($0) }
        #expect(value.backend.engine == nil)
        #expect(expiries.wait(forCount: 1, timeout: .seconds(5)))
        #expect(TimerClock.monotonic.now() >= created.advanced(by: .milliseconds(10)))
        #expect(value.isExpired)
        // A GCD timer armed now, due three lifetimes on, has fired: a second expiry, due one
        // lifetime on at the latest, would have come first.
        #expect(SafeDispatchTimer.Backend.dispatch.firesPast(.milliseconds(30)))
        #expect(expiries.entries == ["token"])
    }

    @Test(.timeLimit(.minutes(1)))
    func invalidateDropsTheValueWithoutExpiry() async throws {
        let expiries = Recorder<Int>()
        let value = ExpiringValue(7, lifetime: .milliseconds(5), backend: .engine(self.engine)) { expiries.append($0) }
        #expect(self.engine.counters.armed == 1)
        #expect(value.invalidate() == 7)
        #expect(value.value == nil)
        #expect(!value.touch())
        #expect(self.engine.counters.armed == 0)
        // Past the lifetime the invalidated value had, on its engine: its expiry would have run.
        #expect(self.engine.firesPast(.milliseconds(5)))
        #expect(expiries.count == 0)
    }

    @Test(.timeLimit(.minutes(1)))
    func releasingTheContainerDisarmsItsTimer() async throws {
        let expiries = Recorder<Int>()
        do {
            let value = ExpiringValue(1, lifetime: .seconds(10), backend: .engine(self.engine)) { expiries.append($0) }
            #expect(value.touch())
            #expect(self.engine.counters.armed == 1)
        }
        #expect(await eventually { self.engine.counters.armed == 0 })
        #expect(expiries.count == 0)
    }

    /// Each race: a tiny lifetime, a touch at a random moment around the expiry, 100k of
    /// them from 8 threads at once. The races are checked together at the end, so that no
    /// thread waits for an expiry and the touches keep landing on live timers.
    @Test(.timeLimit(.minutes(3)))
    func touchRacingExpiryResolvesOneWay() async throws {
        struct Race: Sendable {
            let id: Int
            let created: TimerInstant
            let lifetime: Duration
            let touchStart: TimerInstant
            let touched: Bool
            /// The touch lost, yet the value could still be read.
            let keptAfterLosing: Bool
        }
        let engine = self.engine
        let workers = 8
        let racesPerWorker = 12_500
        let total = workers * racesPerWorker
        let expiries = Recorder<(id: Int, at: TimerInstant)>()
        let races = Recorder<[Race]>()
        // Released, a container would never expire: they all live until the checks.
        let containers = Recorder<[ExpiringValue<Int>]>()
        DispatchQueue.concurrentPerform(iterations: workers) { worker in
            var mine: [Race] = []
            var values: [ExpiringValue<Int>] = []
            for index in 0..<racesPerWorker {
                let id = worker * racesPerWorker + index
                let lifetime = Duration.nanoseconds(Int.random(in: 0...50_000))
                let created = TimerClock.monotonic.now()
                let value = ExpiringValue(id, lifetime: lifetime, backend: .engine(engine)) { id in
                    expiries.append((id, TimerClock.monotonic.now()))
                }
                spin(for: .nanoseconds(Int.random(in: 0...60_000)))
                let touchStart = TimerClock.monotonic.now()
                let touched = value.touch()
                let kept = !touched && value.value != nil
                mine.append(
                    Race(
                        id: id, created: created, lifetime: lifetime, touchStart: touchStart, touched: touched,
                        keptAfterLosing: kept))
                values.append(value)
            }
            races.append(mine)
            containers.append(values)
        }
        #expect(expiries.wait(forCount: total, timeout: .seconds(60)))
        // Past every lifetime (50 µs at most, touched at most 60 µs in): a second expiry
        // would have run before this timer's handler.
        #expect(engine.firesPast(.milliseconds(1)))
        var expiredAt = [TimerInstant?](repeating: nil, count: total)
        var failures: [String] = []
        for (id, at) in expiries.entries {
            if expiredAt[id] != nil { failures.append("\(id): expired twice") }
            expiredAt[id] = at
        }
        var touchWins = 0
        for race in races.entries.joined() {
            if race.touched { touchWins += 1 }
            if race.keptAfterLosing { failures.append("\(race.id): touch lost but the value stayed") }
            guard let at = expiredAt[race.id] else {
                failures.append("\(race.id): never expired")
                continue
            }
            let lifeStart = race.touched ? race.touchStart : race.created
            if at < lifeStart.advanced(by: race.lifetime) { failures.append("\(race.id): expired early") }
        }
        #expect(failures.isEmpty, "\(failures.count) failures: \(failures.prefix(5))")
        #expect(containers.entries.joined().allSatisfy { $0.isExpired && $0.value == nil && !$0.touch() })
        #expect(await eventually { engine.counters.armed == 0 })
        print("touch won \(touchWins) of \(total) races")
    }

    /// Ends racing moves: values touched so that their firings keep moving them on, ended
    /// from their thread at random moments by an invalidate or a release, on a seam whose
    /// values share a millisecond's list (the engine) and on one that arms each expiry
    /// (GCD). No arming outlives its values, nothing expires after an invalidate that won,
    /// nothing twice, and every value is freed.
    @Test(.timeLimit(.minutes(2)), arguments: [false, true])
    func endsRacingRearmsLeaveNothingBehind(onDispatch: Bool) async throws {
        let engine = self.engine
        let backend: SafeDispatchTimer.Backend = onDispatch ? .dispatch : .engine(engine)
        let workers = 4
        let valuesPerWorker = onDispatch ? 1_000 : 5_000
        let total = workers * valuesPerWorker
        let expiries = Recorder<Int>()
        let invalidated = Recorder<[Int]>()
        DispatchQueue.concurrentPerform(iterations: workers) { worker in
            var won: [Int] = []
            for index in 0..<valuesPerWorker {
                let id = worker * valuesPerWorker + index
                let lifetime = Duration.nanoseconds(Int.random(in: 20_000...200_000))
                let value = ExpiringValue(TrackedValue(id), lifetime: lifetime, backend: backend) {
                    expiries.append($0.id)
                }
                for _ in 0..<Int.random(in: 0...3) {
                    spin(for: .nanoseconds(Int.random(in: 0...150_000)))
                    _ = value.touch()
                }
                if Bool.random(), value.invalidate() != nil { won.append(id) }
                // Released here otherwise, as the loop moves on.
            }
            invalidated.append(won)
        }
        #expect(
            await eventually(timeout: .seconds(30)) { TrackedValue.live == 0 },
            "\(TrackedValue.live) values never freed")
        if !onDispatch { #expect(engine.counters.armed == 0) }
        let expired = expiries.entries
        #expect(Set(expired).count == expired.count, "a value expired twice")
        let wonByInvalidate = Set(invalidated.entries.joined())
        #expect(wonByInvalidate.isDisjoint(with: expired), "a value expired after an invalidate won")
        #expect(expired.count + wonByInvalidate.count <= total)
        print("\(expired.count) expired, \(wonByInvalidate.count) invalidated, the rest released, of \(total)")
    }

    /// An engine shut down under live values that keep moving on, while their threads
    /// touch, invalidate and release them: nothing crashes, and every value is freed.
    @Test(.timeLimit(.minutes(1)))
    func shutdownUnderLiveValuesFreesThemAll() throws {
        let engine = try makeEngine()
        let workers = 4
        DispatchQueue.concurrentPerform(iterations: workers + 1) { worker in
            guard worker < workers else {
                spin(for: .milliseconds(5))
                engine.syncShutdown()
                return
            }
            var values: [ExpiringValue<TrackedValue>] = []
            for index in 0..<10_000 {
                let lifetime = Duration.nanoseconds(Int.random(in: 10_000...100_000))
                values.append(ExpiringValue(TrackedValue(index), lifetime: lifetime, backend: .engine(engine)))
                values.randomElement()?.touch()
                if Bool.random() { values.randomElement()?.invalidate() }
                if index % 3 == 0 { values.removeFirst() }
            }
        }
        #expect(engine.counters.armed == 0)
        #expect(eventually { TrackedValue.live == 0 }, "\(TrackedValue.live) values never freed")
    }

    /// Values due in the same millisecond share one arming: a thousand made in a burst
    /// arm no more timers than the milliseconds the burst took, and the last one ended
    /// disarms the last.
    @Test(.needsTheEngine("coalesces values into slots of a millisecond"), .timeLimit(.minutes(1)))
    func valuesDueTogetherShareOneArming() {
        let started = TimerClock.monotonic.now()
        let values = (0..<1_000).map { ExpiringValue($0, lifetime: .seconds(10), backend: .engine(self.engine)) }
        let milliseconds = started.duration(to: TimerClock.monotonic.now()) / .milliseconds(1)
        let armed = self.engine.counters.armed
        #expect(armed >= 1)
        #expect(armed <= UInt64(milliseconds) + 2, "\(armed) armings for a burst of \(milliseconds) ms")
        for value in values.dropLast() { value.invalidate() }
        #expect(self.engine.counters.armed >= 1)
        values.last?.invalidate()
        #expect(self.engine.counters.armed == 0)
    }

    /// The idiom the documentation gives: a table of values whose `onExpiry` removes the
    /// value from the table, so the last reference goes on the firing thread, in the middle
    /// of a slot's firing, while other threads make and release values of the same set.
    @Test(.timeLimit(.minutes(1)))
    func expiryHandlersMayReleaseTheirOwnValues() {
        let engine = self.engine
        let table = LockedCondition<[Int: ExpiringValue<TrackedValue>]>([:])
        let expired = Recorder<Int>()
        let count = 4_000
        DispatchQueue.concurrentPerform(iterations: 4) { worker in
            for id in stride(from: worker, to: count, by: 4) {
                // Long enough to be in the table before it expires, short enough to expire
                // while the other workers still add theirs.
                let lifetime = Duration.microseconds(Int.random(in: 20_000...40_000))
                let value = ExpiringValue(TrackedValue(id), lifetime: lifetime, backend: .engine(engine)) { value in
                    expired.append(value.id)
                    table.withLock { _ = $0.removeValue(forKey: value.id) }
                }
                table.withLock { $0[id] = value }
                // Released at once by their owner: these must never expire. Ten lifetimes
                // long, so that only a broken release, not a worker stalled between making
                // and releasing one, lets one expire.
                _ = ExpiringValue(TrackedValue(-1), lifetime: lifetime * 10, backend: .engine(engine)) { _ in
                    expired.append(-1)
                }
            }
        }
        #expect(expired.wait(forCount: count, timeout: .seconds(30)))
        // Until the released values' lifetimes (at most 400 ms) have passed.
        #expect(!eventually(timeout: .milliseconds(500)) { expired.entries.contains(-1) }, "a released value expired")
        let ids = expired.entries
        #expect(Set(ids).count == count, "\(ids.count) expiries for \(count) values")
        // Only a scheduling stall longer than a lifetime leaves one behind: it expired before
        // its worker put it in the table.
        table.withLock { $0.removeAll() }
        #expect(eventually { TrackedValue.live == 0 }, "\(TrackedValue.live) values never freed")
        #expect(eventually { engine.counters.armed == 0 })
    }

    @Test(.timeLimit(.minutes(1)))
    func hugeLifetimeStaysArmedUntilInvalidated() {
        let expiries = Recorder<Int>()
        let value = ExpiringValue(3, lifetime: .seconds(Int64.max), backend: .engine(self.engine)) {
            expiries.append($0)
        }
        #expect(value.lifetime == .nanoseconds(Int64.max))
        #expect(value.touch())
        #expect(value.value == 3)
        #expect(value.invalidate() == 3)
        #expect(!value.touch())
        #expect(expiries.count == 0)
    }

    @Test(.timeLimit(.minutes(1)))
    func onAShutDownEngineTheValueIsExpiredFromTheStart() throws {
        let engine = try makeEngine()
        engine.syncShutdown()
        let expiries = Recorder<Int>()
        let value = ExpiringValue(4, lifetime: .seconds(60), backend: .engine(engine)) { expiries.append($0) }
        #expect(value.isExpired)
        #expect(value.value == nil)
        #expect(!value.touch())
        #expect(value.invalidate() == nil)
        #expect(expiries.count == 0)
    }
}

/// The same container in virtual time, where every firing and re-arming is deterministic.
@Suite
struct ExpiringValueVirtualTimeTests {
    let timeline = ManualTimeline()

    /// A value on the timeline, and the log its expiries go to.
    func makeValue(lifetime: Duration) -> (value: ExpiringValue<String>, expiries: Recorder<String>) {
        let expiries = Recorder<String>()
        let value = ExpiringValue("session", lifetime: lifetime, backend: .custom(self.timeline)) {
            expiries.append($0)
        }
        return (value, expiries)
    }

    @Test
    func aLateTouchMovesTheSameTimerToTheRestOfTheLifetime() {
        let (value, expiries) = self.makeValue(lifetime: .seconds(10))
        self.timeline.advance(by: .seconds(2))
        #expect(value.touch())
        self.timeline.advance(by: .seconds(7))
        // The last touch counts: at 9 s, so the value lives until 19 s.
        for _ in 0..<1000 { #expect(value.touch()) }
        #expect(self.timeline.armedCount == 1)
        // The timer fires at its first deadline, 10 s, and re-arms for 19 s.
        self.timeline.advance(to: TimerInstant(nanoseconds: 0).advanced(by: .seconds(10)))
        #expect(value.value == "session")
        #expect(self.timeline.armedCount == 1)
        self.timeline.advance(to: TimerInstant(nanoseconds: 0).advanced(by: .seconds(19) - .nanoseconds(1)))
        #expect(value.value == "session")
        #expect(expiries.count == 0)
        self.timeline.advance(by: .nanoseconds(1))
        #expect(value.value == nil)
        #expect(expiries.entries == ["session"])
        #expect(self.timeline.armedCount == 0)
        self.timeline.advance(by: .seconds(60))
        #expect(expiries.count == 1)
    }

    @Test
    func aTouchAfterTheExpiryFiredLoses() {
        let (value, expiries) = self.makeValue(lifetime: .seconds(1))
        self.timeline.advance(by: .seconds(1))
        #expect(expiries.entries == ["session"])
        #expect(!value.touch())
        #expect(value.isExpired)
        #expect(value.invalidate() == nil)
    }

    @Test(arguments: [Duration.zero, .seconds(-5)])
    func aLifetimeOfZeroOrLessExpiresAtTheFirstFiring(lifetime: Duration) {
        let (value, expiries) = self.makeValue(lifetime: lifetime)
        #expect(value.lifetime == .zero)
        // Nothing fires between calls: the value is there until time is advanced.
        #expect(value.touch())
        self.timeline.advance(by: .zero)
        #expect(expiries.entries == ["session"])
        #expect(!value.touch())
        #expect(self.timeline.armedCount == 0)
    }

    @Test
    func aHugeLifetimeSaturatesInsteadOfOverflowing() {
        let (value, expiries) = self.makeValue(lifetime: .seconds(Int64.max))
        self.timeline.advance(by: .seconds(1_000_000_000))
        #expect(value.touch())
        self.timeline.advance(by: .seconds(1_000_000_000))
        #expect(value.value == "session")
        #expect(expiries.count == 0)
        #expect(self.timeline.armedCount == 1)
    }

    /// A timeline standing before 0 (where no schedule can be): a value due before 0
    /// expires when the timeline reaches 0, late rather than never; at `Int64.min` a zero
    /// lifetime still makes a live value, which expires once.
    @Test(arguments: [Int64(-1_000), .min])
    func aValueDueBeforeZeroExpiresAtZero(start: Int64) {
        let timeline = ManualTimeline(startingAt: TimerInstant(nanoseconds: start))
        let expiries = Recorder<String>()
        let lifetime: Duration = start == .min ? .zero : .nanoseconds(10)
        let value = ExpiringValue("session", lifetime: lifetime, backend: .custom(timeline)) {
            expiries.append($0)
        }
        #expect(value.value == "session")
        #expect(timeline.armedCount == 1)
        timeline.advance(to: TimerInstant(nanoseconds: -1))
        #expect(expiries.count == 0)
        timeline.advance(to: TimerInstant(nanoseconds: 0))
        #expect(expiries.entries == ["session"])
        #expect(value.isExpired)
        #expect(timeline.armedCount == 0)
    }

    @Test
    func touchAfterInvalidateFailsAndNothingFires() {
        let (value, expiries) = self.makeValue(lifetime: .seconds(1))
        self.timeline.advance(by: .milliseconds(500))
        #expect(value.touch())
        #expect(value.invalidate() == "session")
        #expect(!value.touch())
        #expect(value.value == nil)
        #expect(self.timeline.armedCount == 0)
        self.timeline.advance(by: .seconds(5))
        #expect(expiries.count == 0)
    }

    @Test
    func releasingTheContainerDisarmsItsTimer() {
        // The value lives only inside the closure.
        let expiries = {
            let (value, expiries) = self.makeValue(lifetime: .seconds(1))
            #expect(value.touch())
            return expiries
        }()
        #expect(self.timeline.armedCount == 0)
        self.timeline.advance(by: .seconds(5))
        #expect(expiries.count == 0)
    }

    @Test
    func onExpiryFindsTheContainerExpired() {
        let seen = Recorder<String>()
        let container = Recorder<ExpiringValue<String>>()
        // Weakly: the container holds the value, whose `onExpiry` would otherwise hold the
        // container, a cycle that outlives the test.
        let value = ExpiringValue("session", lifetime: .seconds(1), backend: .custom(self.timeline)) {
            [weak container] _ in
            guard let value = container?.entries[0] else { return }
            seen.append("touch \(value.touch()), value \(value.value ?? "nil"), expired \(value.isExpired)")
        }
        container.append(value)
        self.timeline.advance(by: .seconds(1))
        #expect(seen.entries == ["touch false, value nil, expired true"])
    }
}

/// A value that counts its live instances, so a test sees every container freed.
final class TrackedValue: Sendable {
    private static let count = Atomic(0)

    static var live: Int { count.load(ordering: .relaxed) }

    let id: Int

    init(_ id: Int) {
        self.id = id
        Self.count.add(1, ordering: .relaxed)
    }

    deinit {
        Self.count.subtract(1, ordering: .relaxed)
    }
}
