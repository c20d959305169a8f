import NIOCore
import NIOHTTP1

/// What the server answers: `GET /stats` gives the counters, any other path a small body
/// computed under the request deadline.
struct Responder: Sendable {
    typealias Answer = (status: HTTPResponseStatus, body: String)

    let deadline: Duration
    let timers: any ServerTimers
    let counters: ServerCounters

    func respond(to request: HTTPRequestHead, on loop: any EventLoop) async -> Answer {
        if request.uri == "/stats" { return (.ok, self.counters.json() + "\n") }
        let uri = request.uri
        do {
            let body = try await self.timers.withDeadline(self.deadline, on: loop) {
                Self.work(on: uri)
            }
            return (.ok, body)
        } catch {
            self.counters.deadlinesExceeded.add(1, ordering: .relaxed)
            return (.serviceUnavailable, "deadline exceeded\n")
        }
    }

    /// The request's work: a digest of its path (FNV-1a), a stand-in for what a handler
    /// computes.
    private static func work(on uri: String) -> String {
        var digest: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in uri.utf8 {
            digest = (digest ^ UInt64(byte)) &* 0x100_0000_01b3
        }
        return "\(String(digest, radix: 16)) \(uri)\n"
    }
}
