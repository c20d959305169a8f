import NIOCore

/// Closes its connection when the `IdleStateHandler` before it reports it idle.
final class IdleEventCloser: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny

    private let counters: ServerCounters

    init(counters: ServerCounters) {
        self.counters = counters
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard event is IdleStateHandler.IdleStateEvent else {
            context.fireUserInboundEventTriggered(event)
            return
        }
        self.counters.idleClosed.add(1, ordering: .relaxed)
        context.close(promise: nil)
    }
}
