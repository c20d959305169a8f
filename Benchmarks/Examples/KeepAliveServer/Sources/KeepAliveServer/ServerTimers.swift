import NIOCore

/// The timers a connection and the server need besides request deadlines, built on
/// Metronome (``MetronomeTimers``), on NIO's own (``NIOTimers``), or none (``NoTimers``).
protocol ServerTimers: Sendable {
    /// Adds to a new connection's pipeline what closes it after `idleTimeout` without a read
    /// (and counts that in `idleClosed`). Called on the channel's event loop.
    func addIdleTimeout(to channel: any Channel) throws

    /// Calls `flush` every `interval` until ``stop()``.
    func startFlushing(every interval: Duration, _ flush: @escaping @Sendable () -> Void)

    /// Stops the flush once no flush runs, and returns facts for the final report (JSON
    /// values by name), such as the timers still armed.
    func stop() async -> KeyValuePairs<String, String>
}

/// The floor builds': no idle timeout and no flush, so that their cost is the server's alone.
struct NoTimers: ServerTimers {
    func addIdleTimeout(to channel: any Channel) throws {}
    func startFlushing(every interval: Duration, _ flush: @escaping @Sendable () -> Void) {}
    func stop() async -> KeyValuePairs<String, String> { ["timers": "\"none\""] }
}
