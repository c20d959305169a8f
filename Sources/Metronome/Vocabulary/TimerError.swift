#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An error from the timer core, carrying the underlying `errno` value.
///
/// Misuse of a timer's state machine is never an error: those calls return `false`. A
/// `TimerError` means the system refused something, such as descriptors running out when
/// an engine is created.
///
/// Two errors are equal when they carry the same ``code``: the operation, setting and
/// reason say where an error came from, not which it is, so a thrown error compares equal
/// to the constant for its code.
///
/// ```swift
/// do {
///     try await EngineClock(backend: .engine(engine)).sleep(for: .seconds(1))
/// } catch let error as TimerError where error == .engineShutDown {
///     // the engine was shut down
/// }
/// ```
public struct TimerError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The raw `errno` value.
    public var code: CInt

    /// The C function that failed, such as `mtr_engine_create`.
    public var operation: String

    /// The setting a configuration check refused, such as `realtimePriority`; `nil` when
    /// the error did not come from one.
    public var setting: String?

    /// Why the setting was refused, naming the allowed range, such as
    /// `must be nil or in 1...99, not 0`; `nil` when ``setting`` is.
    public var reason: String?

    /// Creates an error from an `errno` value and the operation that returned it.
    ///
    /// - Parameters:
    ///   - code: The `errno` value.
    ///   - operation: The C function that failed.
    ///   - setting: The refused setting, for an error from a configuration check.
    ///   - reason: Why the setting was refused, naming the allowed range.
    public init(code: CInt, operation: String, setting: String? = nil, reason: String? = nil) {
        self.code = code
        self.operation = operation
        self.setting = setting
        self.reason = reason
    }

    /// An argument was out of range. The corresponding C error is `EINVAL`.
    public static let invalidArgument = TimerError(code: EINVAL, operation: "")

    /// The process ran out of file descriptors. The corresponding C error is `EMFILE`.
    public static let tooManyOpenFiles = TimerError(code: EMFILE, operation: "")

    /// The engine has been shut down. The corresponding C error is `ESHUTDOWN`.
    public static let engineShutDown = TimerError(code: ESHUTDOWN, operation: "")

    /// Whether two errors carry the same `errno`, whatever the operation.
    public static func == (lhs: TimerError, rhs: TimerError) -> Bool {
        lhs.code == rhs.code
    }

    /// Hashes the `errno` alone, which is what equality compares.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(self.code)
    }

    /// Whether `value` is a `TimerError` with the same `errno`, whatever the operation.
    public static func ~= (pattern: TimerError, value: any Error) -> Bool {
        (value as? TimerError) == pattern
    }

    /// The operation, the refused setting and why when there is one, and the system's
    /// message for ``code``, such as `mtr_engine_create: realtimePriority must be nil or in
    /// 1...99, not 0: Invalid argument (errno 22)`.
    public var description: String {
        let refusal = self.setting.map { setting in " \(setting) \(self.reason ?? "is invalid"):" } ?? ""
        return "\(self.operation):\(refusal) \(String(cString: strerror(self.code))) (errno \(self.code))"
    }
}

extension TimerError {
    /// A value the rules refuse: `EINVAL`, naming the setting and why.
    static func invalid(_ setting: String, _ reason: String, in operation: String) -> TimerError {
        TimerError(code: EINVAL, operation: operation, setting: setting, reason: reason)
    }
}

/// The one funnel for C calls that report an errno.
@inline(__always)
func coreCall(_ operation: StaticString, _ body: () -> CInt) throws(TimerError) {
    let code = body()
    if code != 0 {
        throw TimerError(code: code, operation: "\(operation)")
    }
}
