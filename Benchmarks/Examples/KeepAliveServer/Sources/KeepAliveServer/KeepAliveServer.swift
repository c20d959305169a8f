import Glibc
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
        } catch {
            emit("keepalive-server: \(error)\n\(ServerOptions.usage)", to: STDERR_FILENO)
            exit(64)
        }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: options.threads)
        let counters = ServerCounters()
        let timers: any ServerTimers =
            switch options.timers {
            case .metronome: try MetronomeTimers(idleTimeout: options.idleTimeout, counters: counters)
            case .nio: NIOTimers(idleTimeout: options.idleTimeout, counters: counters, flushLoop: group.next())
            }
        let responder = Responder(deadline: options.deadline, timers: timers, counters: counters)
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

    /// Writes `line` at once: the driver reads stdout through a pipe, where `print` would
    /// hold it in a buffer.
    private static func emit(_ line: String, to descriptor: Int32 = STDOUT_FILENO) {
        var text = line + "\n"
        text.withUTF8 { bytes in _ = write(descriptor, bytes.baseAddress, bytes.count) }
    }
}
