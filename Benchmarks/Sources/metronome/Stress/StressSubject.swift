import Glibc
import MetronomeMeasurements

/// Something `metronome stress` hammers from many threads: a pool of timers on one backend,
/// or the id scheduler.
protocol StressSubject: Sendable {
    /// The row name: `engine`, `dispatch` or `scheduler`.
    var name: String { get }

    /// The operations ``step(_:)`` may perform, indexed by its return value.
    var operationNames: [String] { get }

    /// Performs one random operation from the calling thread.
    ///
    /// - Returns: The index of the operation in ``operationNames``.
    func step(_ random: inout SplitMix64) -> Int

    /// Stops every timer, checks the end-of-run invariants and describes the run.
    ///
    /// - Parameters:
    ///   - operations: How many of each operation the threads performed.
    ///   - seconds: How long the threads ran.
    func finish(operations: [Int], seconds: Double) -> StressResult
}

extension SplitMix64 {
    /// An index drawn with the given weights.
    mutating func pick(weights: [Int], total: Int) -> Int {
        var roll = Int(self.next(below: Int64(total)))
        for (index, weight) in weights.enumerated() {
            if roll < weight { return index }
            roll -= weight
        }
        return weights.count - 1
    }

    /// A uniform value in `range`.
    mutating func nanoseconds(in range: ClosedRange<Int64>) -> Int64 {
        range.lowerBound + self.next(below: range.upperBound - range.lowerBound + 1)
    }
}

/// Polls `condition` every millisecond until it holds or `seconds` pass.
func eventually(seconds: Double, _ condition: () -> Bool) -> Bool {
    let deadline = MonotonicTime.now() + Int64(seconds * 1e9)
    while !condition() {
        if MonotonicTime.now() > deadline { return false }
        var pause = timespec(tv_sec: 0, tv_nsec: 1_000_000)
        nanosleep(&pause, nil)
    }
    return true
}
