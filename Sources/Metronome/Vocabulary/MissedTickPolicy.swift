/// What a repeating timer does after a tick so late that later deadlines have passed too,
/// with tokio's `MissedTickBehavior` meanings.
///
/// A repeating timer's deadlines lie on a grid, `first + k · period`. Take a period of
/// 10 ms and a tick due at 10 ms that fires at 35 ms, after the deadlines at 20 and 30 ms:
///
/// - ``skip`` fires once, at 35 ms, for the deadline at 30 ms, with ``Tick/missed`` 2; the
///   next tick is due at 40 ms, on the grid.
/// - ``burst`` fires for 10, 20 and 30 ms at once, back to back, each with ``Tick/missed``
///   0; the next is due at 40 ms, on the grid.
/// - ``delay`` fires once, at 35 ms, for the deadline at 10 ms, and moves the grid: the next
///   tick is due at 45 ms, a full period after this one fired.
public enum MissedTickPolicy: Sendable, Hashable, CaseIterable {
    /// Fires every missed deadline at once, back to back, then goes on on the grid.
    case burst
    /// Fires once, late, and moves the grid so that the next tick comes a full period after it.
    case delay
    /// Fires once, late, for the latest deadline that passed, counting the ones it skipped in
    /// ``Tick/missed``, then goes on on the grid. The default.
    case skip
}
