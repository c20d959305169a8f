import NIOCore

/// The command line: `keepalive-server [--timers metronome|nio] [--port N] [--threads N]
/// [--idle-timeout-ms N] [--deadline-ms N]`.
struct ServerOptions: Sendable {
    enum Timers: String, Sendable {
        case metronome
        case nio
    }

    var timers = Timers.metronome
    var host = "127.0.0.1"
    /// 0 lets the kernel pick; the ready line says which port it picked.
    var port = 8080
    var threads = System.coreCount
    var idleTimeout = Duration.milliseconds(2000)
    var deadline = Duration.milliseconds(1000)
    var flushInterval = Duration.seconds(1)

    static let usage = """
        usage: keepalive-server [--timers metronome|nio] [--port 0-65535] [--threads 1-256]
                                [--idle-timeout-ms 1-3600000] [--deadline-ms 1-3600000]
        """

    struct Invalid: Error, CustomStringConvertible {
        var description: String
    }

    /// Parses `arguments` (without the program's name); every value is range-checked here,
    /// so that a bad one stops the server before it binds.
    static func parse(_ arguments: some Sequence<String>) throws(Invalid) -> ServerOptions {
        var options = ServerOptions()
        var remaining = arguments.makeIterator()
        while let option = remaining.next() {
            guard let value = remaining.next() else { throw Invalid(description: "\(option) needs a value") }
            switch option {
            case "--timers":
                guard let timers = Timers(rawValue: value) else { throw Invalid(description: "--timers: \(value)") }
                options.timers = timers
            case "--port": options.port = try integer(value, of: option, in: 0...65535)
            case "--threads": options.threads = try integer(value, of: option, in: 1...256)
            case "--idle-timeout-ms":
                options.idleTimeout = .milliseconds(try integer(value, of: option, in: 1...3_600_000))
            case "--deadline-ms": options.deadline = .milliseconds(try integer(value, of: option, in: 1...3_600_000))
            default: throw Invalid(description: "unknown option \(option)")
            }
        }
        return options
    }

    private static func integer(_ text: String, of option: String, in range: ClosedRange<Int>) throws(Invalid) -> Int {
        guard let value = Int(text), range.contains(value) else {
            throw Invalid(description: "\(option): \(text) is not in \(range.lowerBound)...\(range.upperBound)")
        }
        return value
    }
}
