import NIOCore
import NIOHTTP1

/// Answers the requests of one keep-alive connection, in order. A request's work is `async`
/// (it runs under a deadline), so it runs as a task; its answer is written back on the
/// connection's event loop.
final class HTTPHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let responder: Responder
    private var request: HTTPRequestHead?
    /// Cleared when the connection closes: an answer that arrives later is dropped.
    private var isOpen = true

    init(responder: Responder) {
        self.responder = responder
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch self.unwrapInboundIn(data) {
        case .head(let head):
            self.request = head
        case .body:
            break
        case .end:
            guard let head = self.request else { return }
            self.request = nil
            let responder = self.responder
            let answer = context.eventLoop.makePromise(of: Responder.Answer.self)
            responder.counters.requestsInFlight.add(1, ordering: .relaxed)
            answer.completeWithTask { await responder.respond(to: head, on: answer.futureResult.eventLoop) }
            answer.futureResult.assumeIsolated().whenSuccess { answer in
                self.write(answer, keepAlive: head.isKeepAlive, context: context)
                responder.counters.requestsInFlight.subtract(1, ordering: .relaxed)
            }
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.isOpen = false
        context.fireChannelInactive()
    }

    private func write(_ answer: Responder.Answer, keepAlive: Bool, context: ChannelHandlerContext) {
        guard self.isOpen else { return }
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "text/plain; charset=utf-8")
        headers.add(name: "Content-Length", value: "\(answer.body.utf8.count)")
        if !keepAlive { headers.add(name: "Connection", value: "close") }
        let head = HTTPResponseHead(version: .http1_1, status: answer.status, headers: headers)
        context.write(self.wrapOutboundOut(.head(head)), promise: nil)
        let body = context.channel.allocator.buffer(string: answer.body)
        context.write(self.wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
        let written = context.writeAndFlush(self.wrapOutboundOut(.end(nil)))
        self.responder.counters.requestsAnswered.add(1, ordering: .relaxed)
        if !keepAlive {
            written.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
        }
    }
}
