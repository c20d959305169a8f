import Synchronization

/// What the server has done, read by `GET /stats` and printed when it stops.
final class ServerCounters: Sendable {
    let connectionsAccepted = Atomic<Int>(0)
    let requestsAnswered = Atomic<Int>(0)
    let idleClosed = Atomic<Int>(0)
    let deadlinesExceeded = Atomic<Int>(0)
    let flushes = Atomic<Int>(0)
    /// Requests whose work has started and whose answer is not written yet.
    let requestsInFlight = Atomic<Int>(0)
    /// The answered count at the last flush, so a flush can export the interval's rate.
    private let answeredAtFlush = Atomic<Int>(0)
    private let answeredLastInterval = Atomic<Int>(0)

    /// The periodic metrics flush: what a server would push to its metrics backend, here
    /// kept for `/stats`.
    func flush() {
        let answered = self.requestsAnswered.load(ordering: .relaxed)
        let previous = self.answeredAtFlush.exchange(answered, ordering: .relaxed)
        self.answeredLastInterval.store(answered - previous, ordering: .relaxed)
        self.flushes.add(1, ordering: .relaxed)
    }

    /// The counters as one JSON object, with `extra` fields after them.
    func json(adding extra: KeyValuePairs<String, String> = [:]) -> String {
        let fields: [(String, String)] = [
            ("connections_accepted", "\(self.connectionsAccepted.load(ordering: .relaxed))"),
            ("requests_answered", "\(self.requestsAnswered.load(ordering: .relaxed))"),
            ("idle_closed", "\(self.idleClosed.load(ordering: .relaxed))"),
            ("deadlines_exceeded", "\(self.deadlinesExceeded.load(ordering: .relaxed))"),
            ("flushes", "\(self.flushes.load(ordering: .relaxed))"),
            ("answered_last_flush_interval", "\(self.answeredLastInterval.load(ordering: .relaxed))"),
        ]
        let all = fields + extra.map { ($0.key, $0.value) }
        return "{" + all.map { "\"\($0.0)\":\($0.1)" }.joined(separator: ",") + "}"
    }
}
