import MetronomeMeasurements
import NIOCore
import NIOPosix

/// swift-nio's `scheduleTask` + `cancel` on one loop of a `MultiThreadedEventLoopGroup`, with
/// each of the configured counts of tasks armed on that loop.
///
/// Three rows per count: `nio-loop` makes the pairs with `scheduleTask` on the loop's own
/// thread (NIO's fast path, what a channel handler does), `nio-thread` from another thread
/// (what a server's async code does), which takes the loop's lock and may wake it; both
/// allocate a task per pair. `nio-callback` makes them from another thread with
/// `scheduleCallback` and one handler, which a `SelectableEventLoop` arms without
/// allocating. NIO's cancel removes the task from its heap by a linear search, so its cost
/// grows with the tasks armed.
public struct EventLoopScaleSubject: ArmedScaleSubject {
    public let name = "nio"

    public init() {}

    public func run(_ config: ScaleConfiguration) throws -> [ArmedScaleResult] {
        try config.armed.flatMap { try self.run(armed: $0, config) }
    }

    private func run(armed: Int, _ config: ScaleConfiguration) throws -> [ArmedScaleResult] {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        // Shutting down fails every armed task at once; cancelling each would search the heap.
        defer { try? group.syncShutdownGracefully() }
        let loop = group.next()
        let base = MonotonicTime.now()
        let seed = config.seed
        let before = ScaleProbe.residentBytes()
        // Armed from the loop, and their handles kept, as a server keeps one per timeout.
        let tasks = try loop.submit {
            var random = SplitMix64(seed: seed)
            let isolated = loop.assumeIsolated()
            return (0..<armed).map { _ in
                isolated.scheduleTask(deadline: .far(&random, base: base)) {}
            }
        }.wait()
        let bytes = Double(ScaleProbe.residentBytes() - before) / Double(armed)
        let pairs = config.armedOperations
        let limit = config.timeLimitNanoseconds
        let onLoop = try loop.submit {
            var random = SplitMix64(seed: seed &+ 1)
            let isolated = loop.assumeIsolated()
            return ScaleProbe.rate(pairs, limitNanoseconds: limit) { _ in
                isolated.scheduleTask(deadline: .far(&random, base: base)) {}.cancel()
            }
        }.wait()
        var random = SplitMix64(seed: seed &+ 2)
        let fromThread = ScaleProbe.rate(pairs, limitNanoseconds: limit) { _ in
            loop.scheduleTask(deadline: .far(&random, base: base)) {}.cancel()
        }
        let handler = IgnoredCallback()
        let callback = ScaleProbe.rate(pairs, limitNanoseconds: limit) { _ in
            // Refused only by a loop that has shut down, which this one has not.
            try! loop.scheduleCallback(at: .far(&random, base: base), handler: handler).cancel()
        }
        withExtendedLifetime(tasks) {}
        return [
            ArmedScaleResult(
                backend: "nio-loop", armed: armed, pairs: pairs, perPair: .allocates, rate: onLoop,
                bytesPerTimer: bytes),
            ArmedScaleResult(
                backend: "nio-thread", armed: armed, pairs: pairs, perPair: .allocates, rate: fromThread,
                bytesPerTimer: bytes),
            ArmedScaleResult(
                backend: "nio-callback", armed: armed, pairs: pairs, perPair: .reuses, rate: callback,
                bytesPerTimer: bytes),
        ]
    }
}

/// The one handler every `nio-callback` pair arms: a class, so the loop stores a reference
/// and allocates nothing for it.
private final class IgnoredCallback: NIOScheduledCallbackHandler, Sendable {
    func handleScheduledCallback(eventLoop: some EventLoop) {}
}

extension NIODeadline {
    /// ``ScaleProbe/farDeadline(_:base:)`` as a NIO deadline: both count `CLOCK_MONOTONIC`.
    static func far(_ random: inout SplitMix64, base: Int64) -> NIODeadline {
        .uptimeNanoseconds(UInt64(ScaleProbe.farDeadline(&random, base: base)))
    }
}
