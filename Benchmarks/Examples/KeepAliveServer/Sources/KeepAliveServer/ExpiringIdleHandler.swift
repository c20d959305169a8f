import Metronome
import NIOCore

/// Closes its connection after `lifetime` without a read: the connection is an
/// `ExpiringValue` that each read touches.
///
/// A touch is a clock read and an atomic store, with no timer call, so touching on every
/// read costs the same under any load; the engine moves the value along once per lifetime.
final class ExpiringIdleHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny

    private let lifetime: Duration
    private let engine: TimerEngine
    private let counters: ServerCounters
    private var connection: ExpiringValue<any Channel>?

    init(lifetime: Duration, engine: TimerEngine, counters: ServerCounters) {
        self.lifetime = lifetime
        self.engine = engine
        self.counters = counters
    }

    func channelActive(context: ChannelHandlerContext) {
        let counters = self.counters
        self.connection = ExpiringValue(context.channel, lifetime: self.lifetime, engine: self.engine) { channel in
            // On the engine's thread: `close` runs on the channel's event loop.
            counters.idleClosed.add(1, ordering: .relaxed)
            channel.close(promise: nil)
        }
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        self.connection?.touch()
        context.fireChannelRead(data)
    }

    func channelInactive(context: ChannelHandlerContext) {
        // Closed for another reason: the expiry must neither fire nor count.
        self.connection?.invalidate()
        self.connection = nil
        context.fireChannelInactive()
    }
}
