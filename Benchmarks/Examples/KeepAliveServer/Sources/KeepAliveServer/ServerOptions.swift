import NIOCore

/// The command line: `keepalive-server [--timers BUILD] [--port N] [--threads N]
/// [--idle-timeout-ms N] [--deadline-ms N]`, or `--help`.
struct ServerOptions: Sendable {
    /// The builds, which differ only in their timers: which library keeps the idle timeouts
    /// and the request deadlines, and how a request's work meets its deadline.
    enum Timers: String, CaseIterable, Sendable {
        case floor
        case metronome
        case nio
        case metronomeGroup = "metronome-group"
        case nioGroup = "nio-group"
        case floorLoop = "floor-loop"
        case metronomeLoop = "metronome-loop"
        case nioLoop = "nio-loop"

        /// The library whose timers the build uses.
        enum Library: Sendable {
            case none
            case metronome
            case nio
        }

        /// Where a request's work runs and how its deadline reaches it.
        enum Shape: Sendable {
            /// In the request's own task, one timer cancelling that task.
            case task
            /// In a task group, racing a child task that sleeps until the deadline.
            case group
            /// On the connection's event loop, the deadline armed and disarmed there.
            case loop
        }

        var library: Library {
            switch self {
            case .floor, .floorLoop: .none
            case .metronome, .metronomeGroup, .metronomeLoop: .metronome
            case .nio, .nioGroup, .nioLoop: .nio
            }
        }

        var shape: Shape {
            switch self {
            case .floor, .metronome, .nio: .task
            case .metronomeGroup, .nioGroup: .group
            case .floorLoop, .metronomeLoop, .nioLoop: .loop
            }
        }

        var summary: String {
            switch self {
            case .floor: "work in the request's task, no timer at all (no idle timeout, no flush)"
            case .metronome: "work in the request's task; withDeadline cancels it from the engine's thread"
            case .nio: "work in the request's task; loop.scheduleTask { task.cancel() } cancels it"
            case .metronomeGroup: "a task group races the work against Task.sleep on an EngineClock"
            case .nioGroup: "a task group races the work against a loop.scheduleTask future"
            case .floorLoop: "work on the event loop, no timer at all (no idle timeout, no flush)"
            case .metronomeLoop: "work on the event loop; a SafeDispatchTimer on the loop's executor"
            case .nioLoop: "work on the event loop; NIO's allocation-free NIOScheduledCallback"
            }
        }
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
        usage: keepalive-server [--timers BUILD] [--port 0-65535] [--threads 1-256]
                                [--idle-timeout-ms 1-3600000] [--deadline-ms 1-3600000]
        BUILD (metronome by default): idle timeouts on the build's library (IdleStateHandler
        for nio, an ExpiringValue per connection for metronome), and a request deadline:
        """
        + Timers.allCases.map {
            "\n  \($0.rawValue)" + String(repeating: " ", count: 17 - $0.rawValue.count) + $0.summary
        }
        .joined()

    struct Invalid: Error, CustomStringConvertible {
        var description: String
    }

    /// `--help` was asked for: the caller prints ``usage`` and exits.
    struct HelpRequested: Error {}

    /// Parses `arguments` (without the program's name); every value is range-checked here,
    /// so that a bad one stops the server before it binds.
    static func parse(_ arguments: some Sequence<String>) throws -> ServerOptions {
        var options = ServerOptions()
        var remaining = arguments.makeIterator()
        while let option = remaining.next() {
            if option == "--help" || option == "-h" { throw HelpRequested() }
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
