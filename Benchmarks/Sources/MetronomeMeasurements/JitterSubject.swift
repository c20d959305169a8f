/// A timer implementation whose firing precision a jitter run measures.
///
/// Implementations: ``TimerfdLoopSubject`` (the kernel's floor), ``DispatchSubject`` (raw GCD),
/// and engine-backed subjects built on Metronome.
public protocol JitterSubject: Sendable {
    /// The backend's name in results and tables, such as `"timerfd"`, `"gcd"` or `"engine"`.
    var name: String { get }

    /// Runs `config.timers` repeating timers until `recorder` is complete, then tears them down.
    ///
    /// Deadlines are on an absolute schedule from ``JitterConfiguration/deadline(timer:tick:start:)``
    /// with a start from ``JitterConfiguration/start(now:)``. Every firing calls
    /// ``LatencyRecorder/record(scheduledNanoseconds:firedNanoseconds:missed:)`` at handler
    /// entry, with the earliest deadline not yet fired for, and the further deadlines that
    /// have also passed as `missed`; then it busy-spins `config.handlerWorkNanoseconds`. The method returns once
    /// ``LatencyRecorder/waitUntilComplete(timeout:)`` has returned and no handler is running.
    ///
    /// - Parameters:
    ///   - config: The timers to run; already validated.
    ///   - recorder: Where firings go; its target decides when the run ends.
    /// - Returns: What the subject counted about its own wake-ups.
    /// - Throws: ``MeasurementError`` if the timers cannot be set up, or the recorder did not
    ///   complete within ``JitterConfiguration/completionTimeout``.
    func run(_ config: JitterConfiguration, recorder: LatencyRecorder) throws -> SubjectCounters
}
