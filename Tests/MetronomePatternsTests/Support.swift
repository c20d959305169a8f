import Metronome
// Re-exported so that every suite of this target sees `eventually` and the lock box.
@_exported import MetronomeTestSupport
import Testing

/// A log that handlers append to and tests wait on, with a timeout.
final class Recorder<Entry: Sendable>: Sendable {
    private let storage = LockedCondition<[Entry]>([])

    func append(_ entry: Entry) {
        self.storage.update { $0.append(entry) }
    }

    var entries: [Entry] { self.storage.withLock { $0 } }

    var count: Int { self.storage.withLock { $0.count } }

    /// Blocks until at least `count` entries were recorded or `timeout` passed.
    @discardableResult
    func wait(forCount count: Int, timeout: Duration) -> Bool {
        self.storage.wait(timeout: timeout) { $0.count >= count }
    }
}

/// Spins (no syscall) for `duration` on the monotonic clock.
func spin(for duration: Duration) {
    let end = TimerClock.monotonic.now().advanced(by: duration)
    while TimerClock.monotonic.now() < end {}
}

func makeEngine() throws -> TimerEngine {
    try TimerEngine()
}

/// A suite whose every test runs on an engine of its own: Swift Testing makes a fresh
/// instance of the suite, through `init()`, for each test.
protocol EngineSuite {
    var engine: TimerEngine { get }

    init(engine: TimerEngine)
}

extension EngineSuite {
    init() throws {
        self.init(engine: try makeEngine())
    }
}

extension TimerEngine {
    /// Arms a one-shot due `delay` from now on this single-shard engine and waits until its
    /// handler ran. The shard fires in deadline order and runs each handler before the next,
    /// so by then every handler or expiry on the engine that was due earlier, and armed
    /// before this call, has run: an absence checked afterwards is one that could have
    /// shown itself and did not.
    ///
    /// - Returns: Whether the one-shot fired within 10 s.
    func firesPast(_ delay: Duration) -> Bool {
        SafeDispatchTimer.Backend.engine(self).firesPast(delay)
    }
}

extension SafeDispatchTimer.Backend {
    /// Arms a one-shot due `delay` from now and waits until its handler ran. On GCD, which
    /// keeps no order among its timers, `delay` must pass what it is checked against by
    /// more than GCD's leeway.
    ///
    /// - Returns: Whether the one-shot fired within 10 s.
    func firesPast(_ delay: Duration) -> Bool {
        let fired = LockedCondition(false)
        let probe = SafeDispatchTimer(backend: self)
        guard probe.schedule(after: delay, leeway: .zero, handler: { _ in fired.update { $0 = true } }) else {
            return false
        }
        return fired.wait(timeout: .seconds(10)) { $0 }
    }
}
