/// The deadline of ``withTimeout(_:leeway:engine:isolation:operation:)`` or `withDeadline`
/// passed, and the operation then ended by throwing.
///
/// It stands in for the operation's own error, which is most often the `CancellationError`
/// that the deadline's cancellation caused. Every `TimeoutError` equals every other, so a
/// caller can compare with `==` or match the type:
///
/// ```swift
/// do {
///     return try await withTimeout(.milliseconds(200)) { try await backend.fetch(key) }
/// } catch let error as TimeoutError {
///     throw ServiceUnavailable(reason: "\(error)")
/// }
/// ```
public struct TimeoutError: Error, Hashable, Sendable, CustomStringConvertible {
    /// Creates the error.
    public init() {}

    /// Says what happened, for logs.
    public var description: String {
        "the deadline passed before the operation finished"
    }
}
