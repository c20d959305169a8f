import Glibc
import Synchronization

/// One deadline's task and how the deadline ended, decided by one atomic word: the firing
/// thread (or a stopping engine) cancels the task only while the deadline's scope is still
/// open, and the scope waits for a cancellation under way before it returns. So a deadline
/// never cancels its task after the call that set it has returned.
///
/// The watch is also the task-local record of the deadline, linked to the one it runs
/// under, so a callee can read the deadlines in force (`Task.activeEngineDeadline(for:)`)
/// and whether one of them has cancelled the task. A deadline is in force only in the tasks
/// its cancellation reaches: its own and that task's structured children (see ``inForce``).
///
/// Unchecked: `UnsafeCurrentTask` is not `Sendable`, but the one call made on it from
/// another thread, `cancel()`, is one that `Task` offers too and is safe from any thread;
/// the reference it holds keeps the task's memory alive until the scope has ended.
final class DeadlineWatch: @unchecked Sendable {
    /// Where the deadline stands.
    enum Phase: UInt8 {
        /// The timer is being armed.
        case arming
        /// The timer is armed and the body may run.
        case armed
        /// The firing thread or a stopping engine is cancelling the task.
        case cancelling
        /// The deadline passed and the task was cancelled.
        case timedOut
        /// The engine stopped or refused the deadline, which then cancelled the task.
        case engineStopped
        /// The scope ended first; nothing touches the task any more.
        case ended
    }

    /// The innermost deadline of the task that bound it, also read, through copies of the
    /// binding, in unstructured tasks made under it: read it through ``inForce``.
    @TaskLocal static var innermost: DeadlineWatch?

    // Set by the owning task before the binding publishes the watch (``reuse(task:deadline:outer:)``
    // for a watch that no one else holds), and read only after it.

    /// When the deadline falls, on its own clock.
    @exclusivity(unchecked) private(set) var deadline: TimerInstant
    /// The deadline this one runs under, if any.
    @exclusivity(unchecked) private(set) var outer: DeadlineWatch?
    /// Read by another thread only while the phase lets it cancel, which ``end()`` ends.
    @exclusivity(unchecked) private var task: UnsafeCurrentTask?
    private let phase = Atomic<UInt8>(Phase.arming.rawValue)
    /// Where the task-local binding of this watch keeps it; set by the owning task as the
    /// binding begins, before any task can see it.
    @exclusivity(unchecked) private var binding: UnsafeMutableRawPointer?

    init(task: UnsafeCurrentTask, deadline: TimerInstant, outer: DeadlineWatch?) {
        self.task = task
        self.deadline = deadline
        self.outer = outer
    }

    /// Readies a watch whose scope has ended, and that nothing else holds, for a new deadline.
    func reuse(task: UnsafeCurrentTask, deadline: TimerInstant, outer: DeadlineWatch?) {
        self.task = task
        self.deadline = deadline
        self.outer = outer
        self.binding = nil
        self.phase.store(Phase.arming.rawValue, ordering: .relaxed)
    }

    /// Lets go of the task and the outer deadline once the scope has ended (``end()``), so
    /// that a watch kept for reuse keeps neither alive.
    func release() {
        self.task = nil
        self.outer = nil
    }

    /// The innermost deadline in force in the current task: one whose cancellation reaches
    /// the task, so that the task sees no deadline that cannot end it.
    ///
    /// A task-local value is seen by the structured children of the task that bound it, which
    /// the deadline's cancellation reaches, and also by an unstructured `Task {}` made under
    /// it, which the cancellation never reaches. The value cannot tell them apart; where it is
    /// kept can: a child looks it up in its parent's binding, an unstructured task in a copy
    /// of its own, made when the task was. So the owner records its binding's address, and a
    /// reader takes the deadline only when its lookup finds that binding. An address, rather
    /// than the owner's identity: children are tasks of their own, and nothing public names a
    /// task's parent. The outer deadlines are then in force too, as each watch records as its
    /// outer only what was in force where it was made.
    static var inForce: DeadlineWatch? {
        guard let binding = taskLocalValueAddress(key: innermostKey) else { return nil }
        guard let watch = binding.assumingMemoryBound(to: DeadlineWatch?.self).pointee,
            watch.binding == binding
        else { return nil }
        return watch
    }

    /// Called by the owning task first thing inside the binding of this watch.
    func recordBinding() {
        self.binding = taskLocalValueAddress(key: innermostKey)
    }

    /// Whether this deadline has cancelled, or is cancelling, its task.
    var hasCancelled: Bool {
        switch Phase(rawValue: self.phase.load(ordering: .acquiring))! {
        case .cancelling, .timedOut, .engineStopped: true
        case .arming, .armed, .ended: false
        }
    }

    /// The timer fired: cancels the task unless the scope has ended.
    func deadlinePassed() {
        if !self.cancel(from: .armed, endingAs: .timedOut) { _ = self.cancel(from: .arming, endingAs: .timedOut) }
    }

    /// The engine let go of the timer's handler without running it. During the arming that
    /// is a refusal or a stop that the scope handles itself (``refused()``), so nothing is
    /// cancelled here; afterwards the engine stopped under a running body, which is cancelled.
    func engineLetGo() {
        if self.phase.compareExchange(
            expected: Phase.arming.rawValue, desired: Phase.engineStopped.rawValue, ordering: .acquiringAndReleasing
        ).exchanged {
            return
        }
        _ = self.cancel(from: .armed, endingAs: .engineStopped)
    }

    /// The arming succeeded; `false` if the engine stopped meanwhile, and the deadline can
    /// no longer be timed.
    func armed() -> Bool {
        let (exchanged, phase) = self.phase.compareExchange(
            expected: Phase.arming.rawValue, desired: Phase.armed.rawValue, ordering: .acquiringAndReleasing)
        return exchanged || phase != Phase.engineStopped.rawValue
    }

    /// Called in the task itself, when no timer can fire: the deadline has passed already
    /// (`passed`), or the engine refused it. Either way the body runs cancelled, as past its
    /// deadline: a deadline that cannot be kept never lets the work run unbounded.
    func cancelAtOnce(passed: Bool) {
        self.task?.cancel()
        self.phase.store((passed ? Phase.timedOut : .engineStopped).rawValue, ordering: .releasing)
    }

    /// Closes the scope. Waits out a cancellation under way on another thread, which takes
    /// no longer than the task's cancellation handlers.
    func end() {
        while true {
            let (exchanged, phase) = self.phase.compareExchange(
                expected: Phase.armed.rawValue, desired: Phase.ended.rawValue, ordering: .acquiringAndReleasing)
            guard !exchanged, phase == Phase.cancelling.rawValue else { return }
            sched_yield()
        }
    }

    /// Cancels the task if the deadline stands at `phase`, and records `ending`.
    private func cancel(from phase: Phase, endingAs ending: Phase) -> Bool {
        guard
            self.phase.compareExchange(
                expected: phase.rawValue, desired: Phase.cancelling.rawValue, ordering: .acquiringAndReleasing
            ).exchanged
        else { return false }
        self.task?.cancel()
        self.phase.store(ending.rawValue, ordering: .releasing)
        return true
    }
}

/// Tells a ``DeadlineWatch`` when the engine lets go of the deadline's handler: held by the
/// handler alone, so its deinit runs when the timer no longer can fire.
final class DeadlineRelease: Sendable {
    let watch: DeadlineWatch

    init(_ watch: DeadlineWatch) {
        self.watch = watch
    }

    deinit {
        self.watch.engineLetGo()
    }
}

/// The key of ``DeadlineWatch/innermost``'s binding: the task-local object itself, as the
/// standard library's `TaskLocal` keys its own.
private var innermostKey: UnsafeRawPointer {
    UnsafeRawPointer(Unmanaged.passUnretained(DeadlineWatch.$innermost).toOpaque())
}

/// Where the current task's lookup of the task-local `key` finds its value, or `nil` when
/// nothing binds it: the Swift runtime's lookup, which `TaskLocal.get()` reads the value
/// through and which no public API exposes.
@_silgen_name("swift_task_localValueGet")
private func taskLocalValueAddress(key: UnsafeRawPointer) -> UnsafeMutableRawPointer?
