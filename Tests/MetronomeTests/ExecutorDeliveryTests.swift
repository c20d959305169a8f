@preconcurrency import Dispatch
import Glibc
import Metronome
import MetronomeTestSupport
import Synchronization
import Testing

/// A serial executor on a dispatch queue that marks it, so a handler can tell it runs there.
final class MarkedExecutor: SerialExecutor {
    static let key = DispatchSpecificKey<ObjectIdentifier>()
    let queue = DispatchQueue(label: "marked-executor")
    /// Jobs enqueued so far.
    let enqueued = Atomic<Int>(0)

    init() {
        self.queue.setSpecific(key: Self.key, value: ObjectIdentifier(self))
    }

    var isCurrent: Bool {
        DispatchQueue.getSpecific(key: Self.key) == ObjectIdentifier(self)
    }

    func enqueue(_ job: consuming ExecutorJob) {
        self.enqueued.add(1, ordering: .relaxed)
        let job = UnownedJob(job)
        let executor = self.asUnownedSerialExecutor()
        self.queue.async { job.runSynchronously(on: executor) }
    }
}

/// An actor whose executor is a ``MarkedExecutor``.
actor MarkedActor {
    let executor = MarkedExecutor()
    nonisolated var unownedExecutor: UnownedSerialExecutor { self.executor.asUnownedSerialExecutor() }
    var handled = 0
    func count() { self.handled += 1 }
}

/// Handlers delivered on a serial executor or isolated to an actor keep a queue's
/// guarantees: they run there, one at a time, the latest firing standing for the ones a slow
/// handler missed, and none after `cancelAndWait` returns.
///
/// Each delivery is a task, which needs a thread of the cooperative pool: the tests wait by
/// suspending (`await eventually`) and block only threads of their own.
@Suite
struct ExecutorDeliveryTests {
    @Test(.timeLimit(.minutes(1)))
    func handlersRunOnTheExecutorOneAtATime() async throws {
        let executor = MarkedExecutor()
        let timer = SafeDispatchTimer(executor: executor)
        let running = Atomic<Int>(0)
        let overlapped = Atomic<Bool>(false)
        let offExecutor = Atomic<Bool>(false)
        let ticks = LockedCondition<[Tick]>([])
        let scheduled = timer.schedule(after: .zero, every: .milliseconds(1)) { tick in
            if running.add(1, ordering: .acquiringAndReleasing).newValue > 1 {
                overlapped.store(true, ordering: .relaxed)
            }
            if !executor.isCurrent { offExecutor.store(true, ordering: .relaxed) }
            // Slower than the period: firings must merge, not queue.
            usleep(5_000)
            running.subtract(1, ordering: .acquiringAndReleasing)
            ticks.update { $0.append(tick) }
        }
        #expect(scheduled)
        #expect(await eventually(timeout: .seconds(30)) { ticks.withLock { $0.count >= 10 } })
        await timer.cancelAndAwaitHandlers()
        let (overlaps, strays) = (overlapped.load(ordering: .relaxed), offExecutor.load(ordering: .relaxed))
        #expect(!overlaps)
        #expect(!strays)
        let received = ticks.withLock { $0 }
        #expect(received.contains { $0.missed > 0 }, "a slow handler got every firing")
        for (previous, tick) in zip(received, received.dropFirst()) {
            #expect(tick.sequence == previous.sequence + UInt64(tick.missed) + 1)
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func handlersRunIsolatedToTheActor() async throws {
        let actor = MarkedActor()
        let timer = SafeDispatchTimer(isolatedTo: actor)
        let isolated = LockedCondition<[Bool]>([])
        let scheduled = timer.schedule(after: .zero, every: .milliseconds(2)) { [weak actor] in
            guard let actor else { return }
            isolated.update { $0.append(actor.executor.isCurrent) }
            actor.assumeIsolated { $0.count() }
        }
        #expect(scheduled)
        #expect(await eventually(timeout: .seconds(30)) { isolated.withLock { $0.count >= 3 } })
        await timer.cancelAndAwaitHandlers()
        let recorded = isolated.withLock { $0 }
        #expect(recorded.allSatisfy { $0 })
        let handled = await actor.handled
        #expect(handled == recorded.count)
    }

    @Test(.timeLimit(.minutes(1)))
    func cancelAndWaitWaitsForTheHandlerOnTheExecutor() async throws {
        let timer = SafeDispatchTimer(executor: MarkedExecutor())
        let entered = Atomic<Bool>(false)
        let release = MetronomeTestSupport.Gate()
        let finished = Atomic<Bool>(false)
        let scheduled = timer.schedule(after: .zero) {
            entered.store(true, ordering: .releasing)
            _ = release.pass()
            finished.store(true, ordering: .releasing)
        }
        #expect(scheduled)
        #expect(await eventually(timeout: .seconds(30)) { entered.load(ordering: .acquiring) })
        let returned = Atomic<Bool>(false)
        let waiterID = Atomic<Int32>(0)
        let waiter = try PosixThread.spawn {
            waiterID.store(KernelThread.currentID(), ordering: .releasing)
            timer.cancelAndWait()
            returned.store(true, ordering: .releasing)
        }
        // Released once the waiter sleeps: blocked in the wait for the handler.
        #expect(
            await eventually(timeout: .seconds(30)) { KernelThread.isSleeping(waiterID.load(ordering: .acquiring)) })
        release.open()
        #expect(await eventually(timeout: .seconds(30)) { returned.load(ordering: .acquiring) })
        waiter.join()
        let handlerFinished = finished.load(ordering: .acquiring)
        #expect(handlerFinished, "cancelAndWait returned while the handler ran")
    }

    @Test(.timeLimit(.minutes(1)))
    func noHandlerStartsAfterCancelAndWait() async throws {
        let timer = SafeDispatchTimer(executor: MarkedExecutor())
        let count = LockedCondition(0)
        #expect(timer.schedule(after: .zero, every: .microseconds(200)) { count.update { $0 += 1 } })
        #expect(await eventually(timeout: .seconds(30)) { count.withLock { $0 >= 3 } })
        await timer.cancelAndAwaitHandlers()
        let after = count.withLock { $0 }
        try await Task.sleep(for: .milliseconds(20))
        #expect(count.withLock { $0 } == after)
    }

    /// Once `cancelAndAwaitHandlers` returns, nothing of the timer's reaches the executor
    /// any more, a delivery that was on its way included: the executor may be shut down.
    @Test(.timeLimit(.minutes(1)))
    func nothingReachesTheExecutorAfterCancelAndAwaitHandlers() async throws {
        for _ in 0..<20 {
            let executor = MarkedExecutor()
            let timer = SafeDispatchTimer(executor: executor)
            let count = LockedCondition(0)
            #expect(timer.schedule(after: .zero, every: .microseconds(100)) { count.update { $0 += 1 } })
            #expect(await eventually(timeout: .seconds(30)) { count.withLock { $0 >= 2 } })
            await timer.cancelAndAwaitHandlers()
            let jobs = executor.enqueued.load(ordering: .relaxed)
            try await Task.sleep(for: .milliseconds(5))
            #expect(executor.enqueued.load(ordering: .relaxed) == jobs)
        }
    }

    /// An actor that owns its timer is not kept alive by it.
    @Test(.timeLimit(.minutes(1)))
    func theTimerHoldsItsActorWeakly() {
        weak var released: MarkedActor?
        let timer: SafeDispatchTimer
        do {
            let actor = MarkedActor()
            released = actor
            timer = SafeDispatchTimer(isolatedTo: actor)
        }
        #expect(released == nil)
        #expect(timer.state == .idle)
    }
}
