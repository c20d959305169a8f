/// A timer implementation whose coalescing a coalesce run measures.
public protocol CoalesceSubject: Sendable {
    /// The backend's name in results and tables, such as `"gcd"` or `"engine"`.
    var name: String { get }

    /// Arms one one-shot timer per deadline with `config.leewayNanoseconds` of leeway, records
    /// every firing, and returns once all have fired and been torn down.
    ///
    /// Every firing calls ``CoalesceRecorder/record(deadlineNanoseconds:firedNanoseconds:)``
    /// at handler entry.
    ///
    /// - Parameters:
    ///   - config: The run; already validated.
    ///   - deadlines: Absolute `CLOCK_MONOTONIC` deadlines from ``CoalesceConfiguration/deadlines(now:)``.
    ///   - recorder: Where firings go; complete when every timer has fired.
    /// - Returns: What the subject counted about its own wake-ups.
    /// - Throws: ``MeasurementError`` if the timers cannot be set up, or not all fired within
    ///   ``CoalesceConfiguration/completionTimeout``.
    func run(_ config: CoalesceConfiguration, deadlines: [Int64], recorder: CoalesceRecorder) throws -> SubjectCounters
}
