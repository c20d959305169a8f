import NIOConcurrencyHelpers
import NIOCore

/// The connections open now, so that a shutdown can close them all and wait until they are
/// closed: NIO's server channel closes only its listening socket.
final class OpenConnections: Sendable {
    private let channels = NIOLockedValueBox<[ObjectIdentifier: any Channel]>([:])

    /// Keeps `channel` until it closes.
    func add(_ channel: any Channel) {
        let key = ObjectIdentifier(channel)
        self.channels.withLockedValue { $0[key] = channel }
        channel.closeFuture.whenComplete { _ in
            self.channels.withLockedValue { $0[key] = nil }
        }
    }

    /// Closes every open connection and returns once each is closed.
    func closeAll() async {
        let open = self.channels.withLockedValue { Array($0.values) }
        for channel in open { channel.close(promise: nil) }
        for channel in open { try? await channel.closeFuture.get() }
    }
}
