import Glibc

/// A C library call that failed, with its `errno` value.
public struct SystemCallError: Error, Equatable, CustomStringConvertible {
    /// The C function's name.
    public var call: String
    /// The `errno` value it returned or set.
    public var code: CInt

    public init(call: String, code: CInt) {
        self.call = call
        self.code = code
    }

    /// The failure in one sentence, with the C library's text for the code.
    public var description: String {
        "\(self.call) failed: \(String(cString: strerror(self.code))) (errno \(self.code))"
    }
}
