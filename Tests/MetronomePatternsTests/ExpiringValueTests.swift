import Foundation
import Metronome
import Testing

@Suite(.serialized)
struct ExpiringValueTests {
    let engine: TimerEngine

    init() throws {
        self.engine = try makeEngine()
    }

    @Test(.timeLimit(.minutes(1)))
    func neverExpiresWhileTouched() async throws {
        let lifetime = Duration.milliseconds(30)
        let expiries = Recorder<TimerInstant>()
        var lastTouch = TimerClock.monotonic.now()
        let value = ExpiringValue("session", lifetime: lifetime, engine: self.engine) { _ in
            expiries.append(TimerClock.monotonic.now())
        }
        let end = lastTouch.advanced(by: .milliseconds(200))
        var longestGap = Duration.zero
        while TimerClock.monotonic.now() < end {
            // The touch cadence under test, not a wait for something.
            try await Task.sleep(for: .milliseconds(5))
            let start = TimerClock.monotonic.now()
            let touched = value.touch()
            let finished = TimerClock.monotonic.now()
            longestGap = max(longestGap, lastTouch.duration(to: start))
            guard touched else {
                // Only a scheduling stall longer than the lifetime may let it expire.
                #expect(finished >= lastTouch.advanced(by: lifetime))
                break
            }
            #expect(expiries.entries.allSatisfy { $0 >= lastTouch.advanced(by: lifetime) })
            lastTouch = start
        }
        if longestGap < .milliseconds(20) {
            // The normal case: touched in time, it stayed.
            #expect(expiries.count == 0)
            #expect(value.value == "session")
        }
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
        let value = ExpiringValue("token", lifetime: .milliseconds(10), engine: self.engine) { expiries.append($0) }
        #expect(expiries.wait(forCount: 1, timeout: .seconds(5)))
        #expect(TimerClock.monotonic.now() >= created.advanced(by: .milliseconds(10)))
        #expect(expiries.entries == ["token"])
        #expect(!value.touch())
        #expect(value.invalidate() == nil)
        // Give a wrong second expiry a chance to show up.
        try await Task.sleep(for: .milliseconds(30))
        #expect(expiries.count == 1)
        #expect(self.engine.counters.armed == 0)
    }

    @Test(.timeLimit(.minutes(1)))
    func invalidateDropsTheValueWithoutExpiry() async throws {
        let expiries = Recorder<Int>()
        let value = ExpiringValue(7, lifetime: .milliseconds(5), engine: self.engine) { expiries.append($0) }
        #expect(self.engine.counters.armed == 1)
        #expect(value.invalidate() == 7)
        #expect(value.value == nil)
        #expect(!value.touch())
        #expect(self.engine.counters.armed == 0)
        try await Task.sleep(for: .milliseconds(20))
        #expect(expiries.count == 0)
    }

    @Test(.timeLimit(.minutes(1)))
    func releasingTheContainerDisarmsItsTimer() async throws {
        let expiries = Recorder<Int>()
        do {
            let value = ExpiringValue(1, lifetime: .seconds(10), engine: self.engine) { expiries.append($0) }
            #expect(value.touch())
            #expect(self.engine.counters.armed == 1)
        }
        #expect(await eventually { self.engine.counters.armed == 0 })
        #expect(expiries.count == 0)
    }

    /// Each race: a tiny lifetime, a touch at a random moment around the expiry.
    @Test(.timeLimit(.minutes(1)))
    func touchRacingExpiryResolvesOneWay() async throws {
        let engine = self.engine
        let workers = 2
        let racesPerWorker = 5000
        let failures = Recorder<String>()
        let touchWins = Recorder<Int>()
        let expiryWins = Recorder<Int>()
        let allExpiries = Recorder<Recorder<TimerInstant>>()
        DispatchQueue.concurrentPerform(iterations: workers) { worker in
            for race in 0..<racesPerWorker {
                let lifetime = Duration.nanoseconds(Int.random(in: 0...50_000))
                let expiries = Recorder<TimerInstant>()
                allExpiries.append(expiries)
                let value = ExpiringValue(race, lifetime: lifetime, engine: engine) { _ in
                    expiries.append(TimerClock.monotonic.now())
                }
                spin(for: .nanoseconds(Int.random(in: 0...60_000)))
                let touchStart = TimerClock.monotonic.now()
                let touched = value.touch()
                if touched {
                    touchWins.append(worker)
                } else {
                    expiryWins.append(worker)
                    if value.value != nil { failures.append("touch false but value kept") }
                }
                guard expiries.wait(forCount: 1, timeout: .seconds(5)) else {
                    failures.append("no expiry (touched: \(touched))")
                    continue
                }
                if touched, expiries.entries[0] < touchStart.advanced(by: lifetime) {
                    failures.append("touch won but expiry came before the new lifetime ended")
                }
                if value.value != nil { failures.append("value kept after expiry") }
            }
        }
        // Give any wrong second expiry a chance to show up before counting.
        try await Task.sleep(for: .milliseconds(50))
        let counts = allExpiries.entries.map(\.count)
        #expect(counts.count == workers * racesPerWorker)
        #expect(counts.allSatisfy { $0 == 1 })
        #expect(failures.entries.isEmpty, "\(failures.entries.prefix(5))")
        #expect(touchWins.count + expiryWins.count == workers * racesPerWorker)
        #expect(await eventually { engine.counters.armed == 0 })
        print("touch won \(touchWins.count), expiry won \(expiryWins.count)")
    }
}
