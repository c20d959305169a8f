import NIOCore

/// The three timers the server needs, built on Metronome (``MetronomeTimers``) or on NIO's
/// own (``NIOTimers``); everything else in the server is the same for both.
protocol ServerTimers: Sendable {
    /// Adds to a new connection's pipeline what closes it after `idleTimeout` without a read
    /// (and counts that in `idleClosed`). Called on the channel's event loop.
    func addIdleTimeout(to channel: any Channel) throws

    /// Runs a request's `work`, throwing ``DeadlineExceeded`` if `timeout` passes first.
    func withDeadline<Result: Sendable>(
        _ timeout: Duration, on loop: any EventLoop, _ work: @escaping @Sendable () async throws -> Result
    ) async throws -> Result

    /// Calls `flush` every `interval` until ``stop()``.
    func startFlushing(every interval: Duration, _ flush: @escaping @Sendable () -> Void)

    /// Stops the flush once no flush runs, and returns facts for the final report (JSON
    /// values by name), such as the timers still armed.
    func stop() async -> KeyValuePairs<String, String>
}
