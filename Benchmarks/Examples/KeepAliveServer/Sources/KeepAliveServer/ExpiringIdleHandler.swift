import Metronome
import NIOCore

/// Closes its connection after `lifetime` without a read: the connection's handler is an
/// `ExpiringValue` that each read touches.
///
/// A touch is a clock read and an atomic store, with no timer call, so touching on every
/// read costs the same under any load; the engine moves the value along once per lifetime.
/// The expiry fires on the engine's thread, but the close is decided on the connection's
/// event loop: a loop running behind may still hold bytes the client sent in time, and it
/// reads them before it runs the expiry, as it does with its own timers.
final class ExpiringIdleHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny

    private let lifetime: Duration
    private let engine: TimerEngine
    private let counters: ServerCounters
    private var idleness: ExpiringValue<NIOLoopBound<ExpiringIdleHandler>>?
    private var context: ChannelHandlerContext?

    init(lifetime: Duration, engine: TimerEngine, counters: ServerCounters) {
        self.lifetime = lifetime
        self.engine = engine
        self.counters = counters
    }

    func channelActive(context: ChannelHandlerContext) {
        self.context = context
        self.startLifetime(on: context.eventLoop)
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // Expired, but the loop had not run the expiry yet: this read keeps the connection.
        if self.idleness?.touch() == false { self.startLifetime(on: context.eventLoop) }
        context.fireChannelRead(data)
    }

    func channelInactive(context: ChannelHandlerContext) {
        // Closed for another reason: the expiry must neither fire nor count.
        self.idleness?.invalidate()
        self.idleness = nil
        self.context = nil
        context.fireChannelInactive()
    }

    private func startLifetime(on loop: any EventLoop) {
        let handler = NIOLoopBound(self, eventLoop: loop)
        self.idleness = ExpiringValue(handler, lifetime: self.lifetime, backend: .engine(self.engine)) { handler in
            loop.execute { handler.value.closeIfStillIdle() }
        }
    }

    /// On the loop, after the reads it already had: a read since the expiry started a new
    /// lifetime, and a close since then left nothing to close.
    private func closeIfStillIdle() {
        guard let idleness = self.idleness, idleness.isExpired, let context = self.context else { return }
        self.counters.idleClosed.add(1, ordering: .relaxed)
        context.close(promise: nil)
    }
}
