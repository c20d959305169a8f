// swift-format-ignore-file
// Its blocks are the README's and the articles' code, line for line
// (DocumentationSnippetTests), laid out as the reader sees them.
import AsyncAlgorithms
import Metronome
import Testing

/// The README's `EngineClock` example, here because its frame loop iterates
/// swift-async-algorithms' `AsyncTimerSequence`. It is copied as the README shows it; the
/// root package's DocumentationSnippetTests keeps the two equal.
@Suite
struct ReadmeSnippetTests {
    /// One element per `frame()`.
    let frames = AsyncStream.makeStream(of: Void.self)

    func frame() { self.frames.continuation.yield() }

    /// The loop draws until its task is cancelled, then ends.
    @Test(.timeLimit(.minutes(1)))
    func frameLoopOnTheEngineClock() async throws {
        let drawing = Task {
            let clock = EngineClock()                                // .shared engine, monotonic
            try await Task.sleep(for: .milliseconds(5), tolerance: .microseconds(50), clock: clock)
            for await _ in AsyncTimerSequence(interval: .milliseconds(10), clock: clock) { frame() }
            return Task.isCancelled
        }
        for await _ in self.frames.stream.prefix(3) {}
        drawing.cancel()
        #expect(try await drawing.value, "the loop ended before its task was cancelled")
    }
}
