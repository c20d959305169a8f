import MetronomeTestSupport

/// Why a measurement could not be made.
public enum MeasurementError: Error, Equatable, CustomStringConvertible {
    /// A system call failed; `code` is its `errno` value.
    case systemCall(_ operation: String, code: CInt)
    /// A configuration value is out of range; the text names it.
    case invalidConfiguration(String)
    /// A subject did not deliver `expected` samples before its timeout; it delivered `recorded`.
    case timedOut(backend: String, recorded: Int, expected: Int)

    /// The failure in one sentence, with the error text for system calls.
    public var description: String {
        switch self {
        case .systemCall(let operation, let code):
            return SystemCallError(call: operation, code: code).description
        case .invalidConfiguration(let reason):
            return "invalid configuration: \(reason)"
        case .timedOut(let backend, let recorded, let expected):
            return "\(backend) timed out after \(recorded) of \(expected) samples"
        }
    }
}

extension MeasurementError {
    /// The measurement error for a failed C library call.
    init(_ error: SystemCallError) {
        self = .systemCall(error.call, code: error.code)
    }
}
