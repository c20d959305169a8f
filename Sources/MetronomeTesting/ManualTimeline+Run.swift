import Metronome

extension ManualTimeline {
    /// Why ``run(_:)`` ended without its body's result.
    public enum RunError: Error, Hashable, CustomStringConvertible {
        /// Every task of the run was waiting, with no timer armed on the timeline to wake
        /// one and no ``Hold`` taken: in virtual time, nothing would ever happen again.
        ///
        /// The run cancels its body's task; what of it honours cancellation unwinds.
        case deadlock(at: TimerInstant)

        /// The timeline was already running a body: one run at a time per timeline.
        case alreadyRunning

        /// What went wrong, in words that name the deadlock's instant.
        public var description: String {
            switch self {
            case .deadlock(let instant):
                "deadlock in virtual time at \(instant.nanoseconds) ns: every task of the run is waiting, "
                    + "and no timer is armed on the timeline to wake one"
            case .alreadyRunning:
                "the timeline is already running a body: one run at a time"
            }
        }
    }

    /// Runs `body` with time that advances by itself: whenever every task of the run is
    /// waiting, the timeline moves to its next armed deadline and fires what is due there.
    ///
    /// Code under test sleeps, waits on deadlines and iterates ticks as it would in
    /// production, and the test needs no choreography of waits and advances:
    ///
    /// ```swift
    /// let timeline = ManualTimeline()
    /// try await timeline.run {
    ///     try await Task.sleep(for: .seconds(3600), clock: timeline.clock)
    /// }
    /// // timeline.now is exactly one hour on, and no real hour passed
    /// ```
    ///
    /// The tasks of the run are the body's task, its child tasks (`async let`, task
    /// groups), and tasks created with `Task(executorPreference: timeline.taskExecutor)`.
    /// They prefer ``taskExecutor``, whose one thread runs their jobs; when it has none
    /// to run, every one of them is suspended, and time moves on. Idle is counted that
    /// way, never guessed with yields or real-time waits, so a busy machine only makes a
    /// run slower, never early.
    ///
    /// What the executor cannot see is work that runs elsewhere and will resume a task of
    /// the run later: a plain `Task {}` or `Task.detached` (neither inherits an executor
    /// preference), a GCD queue, a real socket or file, a real-time sleep, another thread,
    /// an actor with an executor of its own (the main actor). While such work is pending,
    /// time would move on as if nothing were coming, firing timeouts early; hold it still
    /// with ``hold(_:)`` or ``hold()`` around that work. `TimerScheduler`'s events, which
    /// go through a queue, hold time themselves until delivered; handlers of a
    /// `SafeDispatchTimer` delivered to an actor or serial executor do not.
    ///
    /// Time stands still once the body returns, and the run returns once no task of it
    /// has a job ready. A repeating timer keeps a waiting run going for as long as it is
    /// armed: the test's time limit, not the run, ends a body that waits for what never
    /// comes while a timer repeats.
    ///
    /// - Parameter body: The code to run in virtual time.
    /// - Returns: What `body` returned.
    /// - Throws: What `body` threw; ``RunError/deadlock(at:)`` if every task of the run
    ///   waited with nothing armed to wake one; ``RunError/alreadyRunning`` if the timeline
    ///   was already running a body.
    public func run<Result: Sendable>(
        _ body: sending @escaping () async throws -> Result
    ) async throws -> Result {
        let executor = self.executor
        guard executor.beginRun() else { throw RunError.alreadyRunning }
        let outcome = LockedBox<Swift.Result<Result, any Error>?>(nil)
        // Its first job is queued before the run's thread starts looking for one.
        let task = Task(executorPreference: executor) {
            do {
                let result = try await body()
                outcome.withLockedValue { $0 = .success(result) }
            } catch {
                outcome.withLockedValue { $0 = .failure(error) }
            }
            executor.bodyReturned()
        }
        let end = await withTaskCancellationHandler {
            await withCheckedContinuation { (ended: CheckedContinuation<TimelineExecutor.RunEnd, Never>) in
                executor.startRun(on: self, ended: ended) { task.cancel() }
            }
        } onCancel: {
            task.cancel()
        }
        switch end {
        case .returned:
            guard let result = outcome.withLockedValue({ $0 }) else {
                preconditionFailure("Internal inconsistency: a run returned without its body's result")
            }
            return try result.get()
        case .deadlock(let instant):
            throw RunError.deadlock(at: instant)
        }
    }

    /// The executor the tasks of ``run(_:)`` prefer.
    ///
    /// Give it to an unstructured task created inside a run, so that the run counts it:
    ///
    /// ```swift
    /// let worker = Task(executorPreference: timeline.taskExecutor) { try await poll() }
    /// ```
    ///
    /// Outside a run its jobs go to the global concurrent executor.
    public var taskExecutor: any TaskExecutor {
        self.executor
    }

    /// Holds time still until the returned hold is released, so that a ``run(_:)`` waits
    /// for work it cannot see instead of moving time on.
    ///
    /// Take the hold before starting the work (a request on a real socket, a job on a GCD
    /// queue) and release it once the work has resumed the task that waits for it:
    ///
    /// ```swift
    /// let held = timeline.hold()
    /// DispatchQueue.global().async {
    ///     continuation.resume(returning: load())
    ///     held.release()
    /// }
    /// ```
    ///
    /// A run with every task waiting and a hold taken waits for a job or a release; it
    /// does not count as a deadlock. Holds do not stop ``advance(by:)``.
    ///
    /// - Returns: The hold; releasing it again, or dropping it, releases nothing more.
    public func hold() -> Hold {
        Hold(self.executor)
    }

    /// Holds time still while `body` runs, so that a ``run(_:)`` waits for work that
    /// `body` awaits outside the run's executor.
    ///
    /// ```swift
    /// let reply = try await timeline.hold { try await realSocket.read() }
    /// ```
    ///
    /// - Parameter body: The work to wait for with time still.
    /// - Returns: What `body` returned.
    /// - Throws: What `body` threw.
    nonisolated(nonsending) public func hold<Result, Failure: Error>(
        _ body: nonisolated(nonsending) () async throws(Failure) -> Result
    ) async throws(Failure) -> Result {
        let held = self.hold()
        defer { held.release() }
        return try await body()
    }

    /// A hold on a timeline's time, from ``ManualTimeline/hold()``.
    public final class Hold: Sendable {
        private let executor: TimelineExecutor
        private let held = LockedBox(true)

        init(_ executor: TimelineExecutor) {
            self.executor = executor
            executor.hold()
        }

        /// Lets time move on again, unless another hold is taken; idempotent.
        public func release() {
            let wasHeld = self.held.withLockedValue { held in
                defer { held = false }
                return held
            }
            if wasHeld { self.executor.release() }
        }

        deinit {
            self.release()
        }
    }
}

extension ManualTimeline: DeliveryHoldingBackend {
    package func holdForDelivery() -> @Sendable () -> Void {
        let held = self.hold()
        return { held.release() }
    }
}
