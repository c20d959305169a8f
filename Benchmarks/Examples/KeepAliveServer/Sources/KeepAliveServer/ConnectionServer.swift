import NIOCore
import NIOHTTP1

typealias HTTPConnection = NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>

/// Serves one keep-alive connection: one response per request, in order, until the client
/// closes it, the idle timeout does, or the serving task is cancelled.
struct ConnectionServer: Sendable {
    let responder: Responder

    func serve(_ connection: HTTPConnection) async {
        let loop = connection.channel.eventLoop
        // Errors here are a peer gone mid-response or a close already under way: the
        // connection ends either way.
        try? await connection.executeThenClose { inbound, outbound in
            var request: HTTPRequestHead?
            for try await part in inbound {
                switch part {
                case .head(let head):
                    request = head
                case .body:
                    break
                case .end:
                    guard let head = request else { continue }
                    let (status, body) = await self.responder.respond(to: head, on: loop)
                    try await outbound.write(contentsOf: Self.response(status, body, keepAlive: head.isKeepAlive))
                    self.responder.counters.requestsAnswered.add(1, ordering: .relaxed)
                    guard head.isKeepAlive else { return }
                }
            }
        }
    }

    private static func response(_ status: HTTPResponseStatus, _ body: String, keepAlive: Bool)
        -> [HTTPServerResponsePart]
    {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "text/plain; charset=utf-8")
        headers.add(name: "Content-Length", value: "\(body.utf8.count)")
        if !keepAlive { headers.add(name: "Connection", value: "close") }
        let head = HTTPResponseHead(version: .http1_1, status: status, headers: headers)
        return [.head(head), .body(.byteBuffer(ByteBuffer(string: body))), .end(nil)]
    }
}
