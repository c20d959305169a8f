import Glibc
import Metronome
import NIOCore
import NIOPosix

/// Serves until SIGTERM or SIGINT, then closes every connection and prints its counters as
/// one JSON line. Its first line of output, also JSON, says it is listening and where.
@main
enum KeepAliveServer {
    static func main() async throws {
        let options: ServerOptions
        do {
            options = try ServerOptions.parse(CommandLine.arguments.dropFirst())
        } catch is ServerOptions.HelpRequested {
            emit(ServerOptions.usage)
            exit(0)
        } catch {
            emit("keepalive-server: \(error)\n\(ServerOptions.usage)", to: STDERR_FILENO)
            exit(64)
        }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: options.threads)
        let counters = ServerCounters()
        let (timers, requestDeadline) = try self.build(options, group: group, counters: counters)
        let responder = Responder(deadline: options.deadline, requestDeadline: requestDeadline, counters: counters)
        let connections = OpenConnections()
        let listener = try await HTTPListener.bind(
            options,
            on: group,
            timers: timers,
            responder: responder,
            connections: connections
        )
        timers.startFlushing(every: options.flushInterval, counters.flush)
        let port = listener.localAddress?.port ?? options.port
        emit("{\"listening\":\(port),\"timers\":\"\(options.timers.rawValue)\"}")

        _ = await ShutdownSignal.wait()
        try await listener.close()
        await connections.closeAll()
        // An answer still being computed holds its deadline's timer until its work ends.
        while counters.requestsInFlight.load(ordering: .relaxed) > 0 {
            try await Task.sleep(for: .milliseconds(1))
        }
        let facts = await timers.stop()
        emit(counters.json(adding: facts))
        try await group.shutdownGracefully()
    }

    /// The timers of the build `options.timers` names; everything else is the same in every
    /// build.
    private static func build(
        _ options: ServerOptions, group: MultiThreadedEventLoopGroup, counters: ServerCounters
    ) throws -> (any ServerTimers, RequestDeadline) {
        let build = options.timers
        switch build.library {
        case .none:
            return (NoTimers(), build.shape == .loop ? .loop(NoDeadline()) : .task(NoDeadline()))
        case .metronome:
            let timers = try MetronomeTimers(idleTimeout: options.idleTimeout, counters: counters)
            switch build.shape {
            case .task: return (timers, .task(MetronomeTaskDeadline(engine: timers.engine)))
            case .group:
                return (timers, .task(MetronomeGroupDeadline(clock: EngineClock(backend: .engine(timers.engine)))))
            case .loop: return (timers, .loop(MetronomeLoopDeadlines(engine: timers.engine)))
            }
        case .nio:
            let timers = NIOTimers(idleTimeout: options.idleTimeout, counters: counters, flushLoop: group.next())
            switch build.shape {
            case .task: return (timers, .task(NIOTaskDeadline()))
            case .group: return (timers, .task(NIOGroupDeadline()))
            case .loop: return (timers, .loop(NIOLoopDeadlines()))
            }
        }
    }

    /// Writes `line` at once: the driver reads stdout through a pipe, where `print` would
    /// hold it in a buffer.
    private static func emit(_ line: String, to descriptor: Int32 = STDOUT_FILENO) {
        var text = line + "\n"
        text.withUTF8 { bytes in _ = write(descriptor, bytes.baseAddress, bytes.count) }
    }
}
