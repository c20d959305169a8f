@preconcurrency import Dispatch

/// Where a timer's handlers run when not on the firing thread: a dispatch queue, or a serial
/// executor (an actor's, a NIO event loop's). Either way one timer's handlers run one at a
/// time, a firing that comes meanwhile waits merged into the latest, and `cancelAndWait`
/// waits for the one running: the timer admits one delivery at a time and only then hands
/// it here.
enum HandlerDelivery: Sendable {
    case queue(DispatchQueue)
    case executor(ExecutorIsolation)

    /// Runs `body` on the queue, or isolated to the executor.
    func async(_ body: @escaping @Sendable () -> Void) {
        switch self {
        case .queue(let queue): queue.async(execute: body)
        case .executor(let isolation): isolation.enqueue(body)
        }
    }

    /// The queue a backend may fire on directly; an executor is reached only through it.
    var queue: DispatchQueue? {
        guard case .queue(let queue) = self else { return nil }
        return queue
    }
}

/// An actor whose executor is the one given, so that work enqueued on it runs isolated to
/// that executor: `assumeIsolated` and `preconditionInEventLoop` hold in a handler.
///
/// It keeps an executor object, as a timer keeps its queue. An actor it holds weakly: an
/// actor commonly owns its timer, and the timer must not keep it alive. Once that actor is
/// gone, deliveries run on a global queue, so that the timer's turn still ends (and a
/// `cancelAndWait` returns); a handler finds its weak reference to the actor empty there.
actor ExecutorIsolation {
    private nonisolated let executor: UnownedSerialExecutor
    private nonisolated let owner: Owner

    private enum Owner: @unchecked Sendable {
        case executor(any SerialExecutor)
        /// A weak reference is read atomically by the runtime: safe from any thread.
        case actor(Weak)
    }

    private final class Weak {
        weak var actor: (any Actor)?
        init(_ actor: any Actor) { self.actor = actor }
    }

    init(executor: any SerialExecutor) {
        self.executor = executor.asUnownedSerialExecutor()
        self.owner = .executor(executor)
    }

    init(actor: some Actor) {
        self.executor = actor.unownedExecutor
        self.owner = .actor(Weak(actor))
    }

    nonisolated var unownedExecutor: UnownedSerialExecutor {
        self.executor
    }

    /// A task per delivery: a job on an executor can only come from a task. The timer
    /// admits one delivery at a time, so deliveries never race each other here.
    nonisolated func enqueue(_ body: @escaping @Sendable () -> Void) {
        let keeper: (any Sendable)?
        switch self.owner {
        case .executor(let executor): keeper = executor
        case .actor(let weak): keeper = weak.actor
        }
        guard let keeper else { return DispatchQueue.global().async(execute: body) }
        Task {
            // The unowned executor is the actor's own: it must live while the job runs.
            await self.run(body)
            withExtendedLifetime(keeper) {}
        }
    }

    private func run(_ body: @Sendable () -> Void) {
        body()
    }
}
