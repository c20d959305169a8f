/// The fewest wake-ups that can serve a set of timers with leeway: minimum interval stabbing.
///
/// A timer with deadline `d` and leeway `L` may fire anywhere in `[d, d + L]`. One wake-up at
/// instant `t` serves every timer whose window contains `t`, so the fewest wake-ups for a static
/// set is the fewest points that stab every window. Sorting by right endpoint and placing a
/// point at the right end of each window not yet stabbed is optimal: no solution can place its
/// first point later than the earliest right endpoint, and induction does the rest.
///
/// ```swift
/// let windows = deadlines.map { $0...($0 + leeway) }
/// let optimum = StabbingOptimum.minimumPoints(windows)
/// ```
public enum StabbingOptimum {
    /// The fewest points such that every window contains at least one of them.
    ///
    /// - Parameter windows: Closed windows, in any order; duplicates are allowed.
    /// - Returns: The minimum number of stabbing points; 0 for no windows.
    /// - Complexity: O(*n* log *n*).
    public static func minimumPoints(_ windows: [ClosedRange<Int64>]) -> Int {
        points(windows).count
    }

    /// A minimum set of stabbing points, ascending; each is the right end of some window.
    ///
    /// - Parameter windows: Closed windows, in any order; duplicates are allowed.
    /// - Returns: The greedy solution, whose size is ``minimumPoints(_:)``.
    /// - Complexity: O(*n* log *n*).
    public static func points(_ windows: [ClosedRange<Int64>]) -> [Int64] {
        var points: [Int64] = []
        for window in windows.sorted(by: { $0.upperBound < $1.upperBound }) {
            // Points only grow, so the last one is the only one that can reach into a window
            // whose right end is at or after it.
            if let last = points.last, window.lowerBound <= last {
                continue
            }
            points.append(window.upperBound)
        }
        return points
    }
}
