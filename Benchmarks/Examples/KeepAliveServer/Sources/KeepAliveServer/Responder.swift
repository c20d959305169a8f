import NIOCore
import NIOHTTP1

/// What the server answers: `GET /stats` gives the counters, any other path a small body
/// computed under the request deadline.
struct Responder: Sendable {
    typealias Answer = (status: HTTPResponseStatus, body: String)

    let deadline: Duration
    let requestDeadline: RequestDeadline
    let counters: ServerCounters

    /// The answer computed in the calling task, under `taskDeadline`.
    func respond(to request: HTTPRequestHead, on loop: any EventLoop, within taskDeadline: any TaskDeadline) async
        -> Answer
    {
        if request.uri == "/stats" { return self.stats() }
        let uri = request.uri
        do {
            return (.ok, try await taskDeadline.run(within: self.deadline, on: loop) { Self.work(on: uri) })
        } catch {
            self.counters.deadlinesExceeded.add(1, ordering: .relaxed)
            return (.serviceUnavailable, "deadline exceeded\n")
        }
    }

    /// The answer computed at once, on the connection's loop, under the deadline the caller
    /// armed around this call.
    func respondNow(to request: HTTPRequestHead) -> Answer {
        request.uri == "/stats" ? self.stats() : (.ok, Self.work(on: request.uri))
    }

    private func stats() -> Answer {
        (.ok, self.counters.json() + "\n")
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
