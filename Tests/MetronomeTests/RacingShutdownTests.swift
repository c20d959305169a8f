import Metronome
import MetronomeTestSupport
import Synchronization
import Testing

/// Shutdowns that race each other: whichever returns, and whenever, the engine's teardown is
/// over, with the engine and without it.
@Suite(.tags(.realTime))
struct RacingShutdownTests {
    /// Counts its own end: the handler that holds it has been released.
    private final class Token: Sendable {
        let released: Counter

        init(_ released: Counter) {
            self.released = released
        }

        deinit {
            self.released.value.add(1, ordering: .releasing)
        }
    }

    private final class Counter: Sendable {
        let value = Atomic<Int>(0)
    }

    /// Two threads shut one engine down at once, its timers running: when either call
    /// returns, every timer is cancelled and every handler released.
    @Test(.timeLimit(.minutes(1)))
    func whicheverShutdownReturnsFindsEveryTimerCancelledAndReleased() throws {
        let count = 64
        for _ in 0..<200 {
            let engine = try TimerEngine()
            let released = Counter()
            let timers = (0..<count).map { _ in SafeDispatchTimer(backend: .engine(engine)) }
            for timer in timers {
                let token = Token(released)
                #expect(timer.schedule(after: .seconds(60)) { _ in withExtendedLifetime(token) {} })
            }
            let start = Gate()
            // What each shutdown found the moment it returned: timers not cancelled, and
            // handlers not released.
            let found = LockedCondition<[(running: Int, unreleased: Int)]>([])
            let stoppers = try (0..<2).map { _ in
                try PosixThread.spawn {
                    start.wait()
                    engine.syncShutdown()
                    let running = timers.count { $0.state != .cancelled }
                    let unreleased = count - released.value.load(ordering: .acquiring)
                    found.update { $0.append((running, unreleased)) }
                }
            }
            start.open()
            for stopper in stoppers { stopper.join() }
            let seen = found.withLock { $0 }
            #expect(seen.count == 2)
            #expect(
                seen.allSatisfy { $0.running == 0 && $0.unreleased == 0 },
                "a shutdown returned before the teardown was over: \(seen)")
            if !seen.allSatisfy({ $0.running == 0 && $0.unreleased == 0 }) { break }
        }
    }
}
