import NIOCore
import NIOHTTP1
import NIOPosix

typealias HTTPListener = NIOAsyncChannel<HTTPConnection, Never>

extension HTTPListener {
    /// Binds the server's socket; each accepted connection gets the idle timeout of
    /// `timers` before the HTTP codec, so that every read of its bytes resets it.
    static func bind(_ options: ServerOptions, on group: MultiThreadedEventLoopGroup, timers: any ServerTimers)
        async throws -> HTTPListener
    {
        try await ServerBootstrap(group: group)
            // Ten thousand clients connect at once; the kernel caps this at somaxconn.
            .serverChannelOption(.backlog, value: 65_535)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .bind(host: options.host, port: options.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try timers.addIdleTimeout(to: channel)
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    return try HTTPConnection(wrappingChannelSynchronously: channel)
                }
            }
    }

    /// Accepts and serves connections until the calling task is cancelled; then every
    /// connection's serving task is cancelled too, and each closes its connection.
    func serve(with server: ConnectionServer, counters: ServerCounters) async throws {
        try await withThrowingDiscardingTaskGroup { group in
            try await self.executeThenClose { connections in
                for try await connection in connections {
                    counters.connectionsAccepted.add(1, ordering: .relaxed)
                    group.addTask { await server.serve(connection) }
                }
            }
        }
    }
}
