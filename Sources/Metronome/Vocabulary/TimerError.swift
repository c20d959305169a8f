#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An error from the timer engine: what failed, in the library's words, with the C
/// function and `errno` behind it for those who want them.
///
/// Misuse of a timer's state machine is never an error: those calls return `false`. A
/// `TimerError` means something was refused: a setting out of its range, a deadline on the
/// wrong clock, an engine that was shut down, descriptors running out.
///
/// Its ``description`` says what happened (`the timer's engine was shut down`,
/// `realtimePriority must be nil or in 1...99, not 0`); its ``debugDescription`` adds the
/// C function and the system's message for the `errno`.
///
/// Two errors are equal when they carry the same ``code``: the operation, setting and
/// reason say where an error came from, not which it is, so a thrown error compares equal
/// to the constant for its code.
///
/// ```swift
/// do {
///     try await Task.sleep(for: .seconds(1), clock: EngineClock(backend: .engine(engine)))
/// } catch let error as TimerError where error == .engineShutDown {
///     print(error)  // the timer's engine was shut down
/// }
/// ```
public struct TimerError: Error, Hashable, Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The raw `errno` value.
    public var code: CInt

    /// The C function that failed, such as `mtr_engine_create`.
    public var operation: String

    /// The setting or argument that was refused, such as `realtimePriority`; `nil` when
    /// the error did not come from a check of one.
    public var setting: String?

    /// Why the setting was refused, naming the allowed range, such as
    /// `must be nil or in 1...99, not 0`; `nil` when ``setting`` is.
    public var reason: String?

    /// Creates an error from an `errno` value and the operation that returned it.
    ///
    /// - Parameters:
    ///   - code: The `errno` value.
    ///   - operation: The C function that failed.
    ///   - setting: The refused setting, for an error from a check of one.
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

    /// The timer's engine was shut down, before or while the call waited on it. Every
    /// call that meets a stopped engine throws this value. The corresponding C error is
    /// `ESHUTDOWN`, from `mtr_engine_stop`.
    public static let engineShutDown = TimerError(code: ESHUTDOWN, operation: "mtr_engine_stop")

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

    /// What happened, in the library's words: the refused setting and its allowed range,
    /// the clock that did not match, or what the `errno` meant here, such as `the timer's
    /// engine was shut down`. No C name and no `errno`: those are in ``debugDescription``.
    public var description: String {
        if let setting = self.setting { return "\(setting) \(self.reason ?? "is invalid")" }
        switch self.code {
        case ESHUTDOWN: return "the timer's engine was shut down"
        case EMFILE: return "the process ran out of file descriptors"
        case ENFILE: return "the system ran out of file descriptors"
        case ENOMEM: return "memory ran out"
        case EPERM where self.operation == "pthread_setschedparam":
            return "the firing thread may not take a real-time priority without CAP_SYS_NICE"
        case EINVAL where self.operation == "pthread_setaffinity_np":
            return "the firing thread cannot be pinned to that CPU"
        default:
            let failed = self.operation.isEmpty ? "a timer call" : self.operation
            return "\(failed) failed: \(String(cString: strerror(self.code)))"
        }
    }

    /// ``description``, then the C function and the system's message for ``code``, such as
    /// `the timer's engine was shut down (mtr_timer_create: Cannot send after transport
    /// endpoint shutdown, errno 108)`.
    public var debugDescription: String {
        let function = self.operation.isEmpty ? "" : "\(self.operation): "
        return "\(self.description) (\(function)\(String(cString: strerror(self.code))), errno \(self.code))"
    }
}

extension TimerError {
    /// A value the rules refuse: `EINVAL`, naming the setting and why.
    static func invalid(_ setting: String, _ reason: String, in operation: String) -> TimerError {
        TimerError(code: EINVAL, operation: operation, setting: setting, reason: reason)
    }

    /// A deadline on another clock than the one that measures it.
    static func wrongClock(_ deadline: TimerClock, expected: TimerClock, in operation: String) -> TimerError {
        .invalid("deadline", "is on the \(deadline) clock; it must be on the \(expected) clock", in: operation)
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
