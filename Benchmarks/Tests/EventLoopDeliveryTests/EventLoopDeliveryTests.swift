import Metronome
import NIOCore
import NIOPosix
import Synchronization
import Testing

/// A timer delivering on a real NIO event loop: its handlers run on the loop, one at a time,
/// and none starts after the cancel returns.
@Suite
struct EventLoopDeliveryTests {
    @Test(.timeLimit(.minutes(1)))
    func handlersRunOnTheEventLoopAndStopAfterCancel() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let timer = SafeDispatchTimer(executor: loop.executor)
        let fired = Atomic<Int>(0)
        let offLoop = Atomic<Int>(0)
        let running = Atomic<Int>(0)
        let overlaps = Atomic<Int>(0)
        let scheduled = timer.schedule(after: .zero, every: .milliseconds(1)) {
            if running.add(1, ordering: .acquiringAndReleasing).newValue > 1 { overlaps.add(1, ordering: .relaxed) }
            if !loop.inEventLoop { offLoop.add(1, ordering: .relaxed) }
            loop.preconditionInEventLoop()
            running.subtract(1, ordering: .acquiringAndReleasing)
            fired.add(1, ordering: .relaxed)
        }
        #expect(scheduled)
        while fired.load(ordering: .relaxed) < 20 { try await Task.sleep(for: .milliseconds(1)) }
        await timer.cancelAndAwaitHandlers()
        let stopped = fired.load(ordering: .relaxed)
        // A handler started after the cancel would show on the loop: let it run a while.
        try await loop.submit {}.get()
        try await Task.sleep(for: .milliseconds(20))
        let after = fired.load(ordering: .relaxed)
        #expect(after == stopped)
        let (strays, overlapped) = (offLoop.load(ordering: .relaxed), overlaps.load(ordering: .relaxed))
        #expect(strays == 0)
        #expect(overlapped == 0)
        try await group.shutdownGracefully()
    }
}

// swift-format-ignore
/// The snippets of "Metronome in a server", section "Delivery on an event loop", as the
/// article shows them.
@Suite
struct EventLoopArticleSnippetTests {
    actor Session {
        private var pings = 0
        private lazy var keepalive = SafeDispatchTimer(isolatedTo: self)

        func start() {
            self.keepalive.schedule(after: .seconds(15), every: .seconds(15)) { [weak self] in
                self?.assumeIsolated { $0.pings += 1 }
            }
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func deliveryOnAnEventLoop() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let eventLoop = group.next()
        let flushed = Atomic<Int>(0)
        @Sendable func flushPendingWrites() { flushed.add(1, ordering: .relaxed) }

        let flush = SafeDispatchTimer(executor: eventLoop.executor)
        flush.schedule(after: .milliseconds(50), every: .milliseconds(50)) {
            eventLoop.preconditionInEventLoop()
            flushPendingWrites()
        }

        while flushed.load(ordering: .relaxed) < 2 { try await Task.sleep(for: .milliseconds(5)) }
        await flush.cancelAndAwaitHandlers()
        // The session's timer goes with the session: it holds the actor weakly.
        weak var released: Session?
        do {
            let session = Session()
            released = session
            await session.start()
        }
        #expect(released == nil)
        try await group.shutdownGracefully()
    }
}
