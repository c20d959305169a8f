import Dispatch
import Glibc

/// Waits for SIGTERM or SIGINT, so that the server can close everything and report before
/// it exits instead of dying on the default action.
enum ShutdownSignal {
    /// Returns the first of the signals to arrive.
    static func wait() async -> Int32 {
        let (arrivals, continuation) = AsyncStream.makeStream(of: Int32.self)
        let sources = [SIGTERM, SIGINT].map { number in
            // Their default action ends the process at once; the source receives them instead.
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { continuation.yield(number) }
            source.resume()
            return source
        }
        defer { sources.forEach { $0.cancel() } }
        for await number in arrivals { return number }
        return SIGTERM
    }
}
