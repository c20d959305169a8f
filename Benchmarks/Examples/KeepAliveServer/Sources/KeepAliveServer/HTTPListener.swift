import NIOCore
import NIOHTTP1
import NIOPosix

/// The server's listening socket.
enum HTTPListener {
    /// Binds the listening socket. Each accepted connection gets the idle timeout of
    /// `timers` before the HTTP codec, so that every read of its bytes resets it.
    static func bind(
        _ options: ServerOptions,
        on group: MultiThreadedEventLoopGroup,
        timers: any ServerTimers,
        responder: Responder,
        connections: OpenConnections
    ) async throws -> any Channel {
        let counters = responder.counters
        return try await ServerBootstrap(group: group)
            // Ten thousand clients connect at once; the kernel caps this at somaxconn.
            .serverChannelOption(.backlog, value: 65_535)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            // NIO accepts 4 connections per loop iteration by default: with thousands of
            // connections busy on the same loop, a client would wait seconds to be accepted.
            .serverChannelOption(.maxMessagesPerRead, value: 256)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    counters.connectionsAccepted.add(1, ordering: .relaxed)
                    connections.add(channel)
                    try timers.addIdleTimeout(to: channel)
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(HTTPHandler(responder: responder))
                }
            }
            .bind(host: options.host, port: options.port)
            .get()
    }
}
