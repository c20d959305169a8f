import Metronome
import NIOCore

/// The server's timers on a Metronome engine of its own: an `ExpiringValue` per connection,
/// request deadlines with `withDeadline`, and a repeating `SafeDispatchTimer` flush.
final class MetronomeTimers: ServerTimers {
    /// Its own engine rather than `.shared`, so that its counters are this server's alone.
    private let engine: TimerEngine
    private let idleTimeout: Duration
    private let counters: ServerCounters
    private let flushTimer: SafeDispatchTimer

    init(idleTimeout: Duration, counters: ServerCounters) throws {
        self.engine = try TimerEngine(configuration: .init(name: "server-timers"))
        self.idleTimeout = idleTimeout
        self.counters = counters
        self.flushTimer = SafeDispatchTimer(backend: .engine(self.engine))
    }

    func addIdleTimeout(to channel: any Channel) throws {
        let handler = ExpiringIdleHandler(lifetime: self.idleTimeout, engine: self.engine, counters: self.counters)
        try channel.pipeline.syncOperations.addHandler(handler)
    }

    /// The work runs in the request's own task; one engine timer cancels that task at the
    /// deadline. No child task, no second timer.
    func withDeadline<Result: Sendable>(
        _ timeout: Duration, on loop: any EventLoop, _ work: @escaping @Sendable () async throws -> Result
    ) async throws -> Result {
        try await Metronome.withDeadline(in: timeout, clock: EngineClock(backend: .engine(self.engine))) {
            do {
                return try await work()
            } catch is CancellationError where Task.isEngineDeadlineExpired {
                throw DeadlineExceeded()
            }
        }
    }

    func startFlushing(every interval: Duration, _ flush: @escaping @Sendable () -> Void) {
        // Runs inline on the engine's thread: a flush is a few atomic loads and stores.
        self.flushTimer.schedule(after: interval, every: interval) { _ in flush() }
    }

    func stop() async -> KeyValuePairs<String, String> {
        await self.flushTimer.cancelAndAwaitHandlers()
        // Every connection is closed by now, so every idle timeout and deadline was
        // disarmed: what is still armed leaked.
        let counters = self.engine.counters
        await self.engine.shutdown()
        return [
            "timers": "\"metronome\"", "engine_armed": "\(counters.armed)", "engine_wakeups": "\(counters.wakeups)",
            "engine_fired": "\(counters.fired)",
        ]
    }
}
