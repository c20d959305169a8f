#if ServiceLifecycle
import ServiceLifecycle

/// An engine in a `ServiceGroup`: it runs until the group shuts down, then shuts down with
/// it. Here, in `Metronome` itself, rather than in a module of its own: a client that turns
/// the trait on gets the conformance from the import it already has, and a conformance of
/// an engine to `Service` anywhere else would be a retroactive one.
extension TimerEngine: Service {
    /// Waits for the group's graceful shutdown (or the task's cancellation), then stops the
    /// engine as `await shutdown()` does: it arms no new timer, lets a running handler
    /// finish, and releases every handler.
    ///
    /// Put the engine first among the group's services: a group shuts its services down in
    /// reverse order, so the engine stops after the services whose timers it fires.
    /// ``TimerEngine/shared`` in a group ends with it and goes on running, since nothing
    /// can shut it down.
    ///
    /// ```swift
    /// let engine = try TimerEngine()
    /// let group = ServiceGroup(
    ///     services: [engine, server],
    ///     gracefulShutdownSignals: [.sigterm],
    ///     logger: logger
    /// )
    /// try await group.run()
    /// ```
    public func run() async throws {
        // Cancellation is a shutdown too: either way the engine stops.
        try? await gracefulShutdown()
        await self.shutdown()
    }
}
#endif
