import NIOCore
import NIOHTTP1

/// Answers the requests of one keep-alive connection, in order. In the task and group
/// builds a request's work is `async` and runs as a task, its answer written back on the
/// connection's event loop; in the loop builds it runs on the loop, between arming and
/// disarming the connection's deadline.
final class HTTPHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let responder: Responder
    private var request: HTTPRequestHead?
    /// Cleared when the connection closes: an answer that arrives later is dropped.
    private var isOpen = true
    private var context: ChannelHandlerContext?
    /// The loop builds' deadline; `nil` in the others and once the connection closed.
    private var loopDeadline: (any LoopDeadline)?

    init(responder: Responder) {
        self.responder = responder
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        guard case .loop(let deadlines) = self.responder.requestDeadline else { return }
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        self.loopDeadline = deadlines.make(on: context.eventLoop) { handler.value.deadlinePassed() }
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
            switch self.responder.requestDeadline {
            case .loop:
                self.loopDeadline?.arm(self.responder.deadline)
                let answer = self.responder.respondNow(to: head)
                self.loopDeadline?.disarm()
                self.write(answer, keepAlive: head.isKeepAlive, context: context)
            case .task(let taskDeadline):
                self.respondInTask(to: head, within: taskDeadline, context: context)
            }
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.isOpen = false
        // The deadline's handler holds this handler: let go of both.
        self.loopDeadline?.disarm()
        self.loopDeadline = nil
        self.context = nil
        context.fireChannelInactive()
    }

    private func respondInTask(
        to head: HTTPRequestHead, within taskDeadline: any TaskDeadline, context: ChannelHandlerContext
    ) {
        let responder = self.responder
        let answer = context.eventLoop.makePromise(of: Responder.Answer.self)
        responder.counters.requestsInFlight.add(1, ordering: .relaxed)
        answer.completeWithTask {
            await responder.respond(to: head, on: answer.futureResult.eventLoop, within: taskDeadline)
        }
        answer.futureResult.assumeIsolated().whenSuccess { answer in
            self.write(answer, keepAlive: head.isKeepAlive, context: context)
            responder.counters.requestsInFlight.subtract(1, ordering: .relaxed)
        }
    }

    /// A request's work outlived its deadline on the loop: the connection is closed, as a
    /// server gives up on a request it can no longer answer in time.
    private func deadlinePassed() {
        guard let context = self.context else { return }
        self.responder.counters.deadlinesExceeded.add(1, ordering: .relaxed)
        context.close(promise: nil)
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
