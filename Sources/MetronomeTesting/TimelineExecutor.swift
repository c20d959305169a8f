@preconcurrency import Dispatch
import Metronome

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The task executor of a ``ManualTimeline``: during a run, one thread of its own runs every
/// job of the run's tasks, and when it has none, moves the timeline on.
///
/// Idle is counted: a job ready for the run is in the queue or running on the thread, and
/// the thread is the only one that runs them, so an empty queue on the thread between jobs
/// means every task of the run is suspended. Between runs, jobs go to the global queue.
final class TimelineExecutor: TaskExecutor, @unchecked Sendable {
    /// How a run ended, told to the task that started it once the thread has stopped.
    enum RunEnd: Sendable {
        /// The body returned or threw.
        case returned
        /// Every task waited with no timer armed and no hold, at this virtual instant.
        case deadlock(TimerInstant)
    }

    /// A run under way.
    private struct Run {
        /// Told once the thread has stopped; set when the thread starts.
        var ended: CheckedContinuation<RunEnd, Never>?
        /// Set when the body has returned or a deadlock was found: time stands still, and
        /// the thread stops once no job is left.
        var end: RunEnd?
        /// Cancels the body's task when a deadlock ends the run.
        var cancelBody: (@Sendable () -> Void)?
    }

    private struct State {
        var jobs: [UnownedJob] = []
        var head = 0
        var holds = 0
        var run: Run?
        /// The thread waits on ``TimelineExecutor/wakeUp`` for a job or a release.
        var waiting = false

        mutating func popJob() -> UnownedJob? {
            guard self.head < self.jobs.count else { return nil }
            let job = self.jobs[self.head]
            self.head += 1
            if self.head == self.jobs.count {
                self.jobs.removeAll(keepingCapacity: true)
                self.head = 0
            }
            return job
        }

        /// Whether the thread must be woken, clearing the mark.
        mutating func takeWaiting() -> Bool {
            defer { self.waiting = false }
            return self.waiting
        }
    }

    private let state = LockedBox(State())
    private let wakeUp = DispatchSemaphore(value: 0)

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let (queued, wake) = self.state.withLockedValue { state -> (Bool, Bool) in
            guard state.run != nil else { return (false, false) }
            state.jobs.append(job)
            return (true, state.takeWaiting())
        }
        if wake { self.wakeUp.signal() }
        if !queued {
            // No run: a task that prefers this executor still runs, on the global queue.
            let executor = self.asUnownedTaskExecutor()
            DispatchQueue.global().async { job.runSynchronously(on: executor) }
        }
    }

    /// Counts a hold: while any is held, a run waits instead of moving time on.
    func hold() {
        self.state.withLockedValue { $0.holds += 1 }
    }

    func release() {
        let wake = self.state.withLockedValue { state in
            state.holds -= 1
            return state.holds == 0 && state.takeWaiting()
        }
        if wake { self.wakeUp.signal() }
    }

    /// Claims the executor for a run; `false` if one is under way. Jobs queue from here
    /// on, for the thread that ``startRun(on:ended:cancelBody:)`` starts.
    func beginRun() -> Bool {
        self.state.withLockedValue { state in
            guard state.run == nil else { return false }
            state.run = Run()
            return true
        }
    }

    /// Starts the run's thread, once the body's task is made (its first job queued).
    ///
    /// - Parameters:
    ///   - timeline: The timeline to move on when the run is idle.
    ///   - ended: Told how the run ended, once the thread has stopped.
    ///   - cancelBody: Cancels the body's task when a deadlock ends the run.
    func startRun(
        on timeline: ManualTimeline,
        ended: CheckedContinuation<RunEnd, Never>,
        cancelBody: @escaping @Sendable () -> Void
    ) {
        self.state.withLockedValue { state in
            state.run?.ended = ended
            state.run?.cancelBody = cancelBody
        }
        startThread { self.serve(timeline) }
    }

    /// The body has returned: time stands still from here.
    func bodyReturned() {
        self.state.withLockedValue { state in
            if state.run?.end == nil { state.run?.end = .returned }
        }
    }

    private enum Step {
        case job(UnownedJob)
        case moveTimeOn
        case wait
        case stop(CheckedContinuation<RunEnd, Never>?, RunEnd)
    }

    /// The run's thread: runs jobs while there are any, and moves the timeline to its next
    /// deadline when there are none, until the run has ended and its last job has run.
    private func serve(_ timeline: ManualTimeline) {
        let executor = self.asUnownedTaskExecutor()
        while true {
            let step = self.state.withLockedValue { state -> Step in
                if let job = state.popJob() { return .job(job) }
                guard let run = state.run else {
                    preconditionFailure("Internal inconsistency: a run's thread with no run")
                }
                if let end = run.end {
                    state.run = nil
                    return .stop(run.ended, end)
                }
                if state.holds > 0 {
                    state.waiting = true
                    return .wait
                }
                return .moveTimeOn
            }
            switch step {
            case .job(let job):
                job.runSynchronously(on: executor)
            case .wait:
                self.wakeUp.wait()
            case .moveTimeOn:
                // Handlers run here, on the run's thread: a task they resume is queued
                // before the next look at the queue.
                if !timeline.advanceToNextDeadline() { self.deadlocked(at: timeline.now) }
            case .stop(let ended, let end):
                ended?.resume(returning: end)
                return
            }
        }
    }

    private func deadlocked(at now: TimerInstant) {
        let cancelBody = self.state.withLockedValue { state -> (@Sendable () -> Void)? in
            state.run?.end = .deadlock(now)
            return state.run?.cancelBody
        }
        // Whatever of the body honours cancellation unwinds on this thread before it stops.
        cancelBody?()
    }
}

/// Runs `body` on a new detached thread.
private func startThread(_ body: @escaping @Sendable () -> Void) {
    final class Start {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
    let start = Unmanaged.passRetained(Start(body)).toOpaque()
    var thread = pthread_t()
    let created = pthread_create(
        &thread,
        nil,
        { context in
            Unmanaged<Start>.fromOpaque(context!).takeRetainedValue().body()
            return nil
        },
        start
    )
    precondition(created == 0, "pthread_create failed with \(created): no thread for ManualTimeline.run")
    pthread_detach(thread)
}
