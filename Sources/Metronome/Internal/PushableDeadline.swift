internal import CMetronome
import Synchronization

/// The deadline of a running one-shot on an engine, kept in the ``SafeDispatchTimer`` itself,
/// so that a reschedule pushing it later (an idle timeout moved on every request) takes no
/// lock and reaches no object but the timer: it only moves this word later.
///
/// The word is published once such a one-shot was pushed later under the lock, by the
/// reschedule that keeps its arming (`TimerStateMachine.RescheduleAction.keepArmed`). The
/// timer's lock holder takes it back before every locked operation (``withdraw()``) and
/// applies the deadline a push left, as that reschedule would have; after the operation it
/// publishes the deadline again while the timer is still that one-shot. A push is thus that
/// reschedule without the lock: it succeeds only while the word is published, and a lock
/// holder that took the word back has every push that succeeded. Anything else (an earlier
/// deadline, a period, a timer not running) finds the word withdrawn or later, and takes
/// the lock.
struct PushableDeadline: ~Copyable {
    /// The published deadline, in nanoseconds on the timer's clock, or ``withdrawn``.
    private let deadline = Atomic<Int64>(Self.withdrawn)
    /// The process's fork count (`mtr_fork_generation`) when the deadline was published: a
    /// forked child's engine is a dead copy, which refuses the push that the locked path
    /// would refuse.
    private let fork = Atomic<UInt32>(0)

    private static var withdrawn: Int64 { .min }

    /// The latest deadline a push may set. Published only with a leeway of at most as
    /// much, so every window a push makes is representable: a later deadline (146 years on)
    /// takes the lock, which keeps the window in range.
    static var latest: Int64 { .max / 2 }

    init() {}

    /// Moves the published deadline to `deadline`, unless that is earlier.
    ///
    /// - Returns: `true` if the timer now fires at `deadline`, as the locked reschedule would
    ///   have it; `false` when nothing changed and the caller takes the lock.
    func push(to deadline: Int64) -> Bool {
        guard deadline <= Self.latest else { return false }
        var published = self.deadline.load(ordering: .relaxed)
        while published != Self.withdrawn, self.fork.load(ordering: .relaxed) == mtr_fork_generation() {
            if published >= deadline { return published == deadline }
            let (exchanged, current) = self.deadline.compareExchange(
                expected: published, desired: deadline, ordering: .relaxed)
            if exchanged { return true }
            published = current
        }
        return false
    }

    /// Whether a push may succeed now: a hint for a caller that must read a clock first.
    var isPublished: Bool {
        self.deadline.load(ordering: .relaxed) != Self.withdrawn
    }

    /// Takes the word back, for the holder of the timer's lock.
    ///
    /// - Returns: The published deadline, as the last push left it; `nil` if none was
    ///   published.
    func withdraw() -> Int64? {
        // Only the lock holder publishes, so a word found withdrawn stays so: most locked
        // operations find it withdrawn and need not write it.
        guard self.isPublished else { return nil }
        let deadline = self.deadline.exchange(Self.withdrawn, ordering: .relaxed)
        return deadline == Self.withdrawn ? nil : deadline
    }

    /// Publishes `deadline` (at most ``latest``), for the holder of the timer's lock.
    func publish(_ deadline: Int64) {
        self.fork.store(mtr_fork_generation(), ordering: .relaxed)
        self.deadline.store(deadline, ordering: .releasing)
    }
}
