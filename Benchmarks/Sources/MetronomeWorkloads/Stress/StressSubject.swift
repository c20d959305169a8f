import MetronomeMeasurements

/// Something `metronome stress` hammers from many threads: a pool of timers on one backend,
/// the id scheduler, a pool of expiring values, or engines' lifecycles.
public protocol StressSubject: Sendable {
    /// The row name, one of `StressSubjects.names`.
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

extension StressSubject {
    /// How many of each operation the threads performed, by the operation's name.
    func operationsByKind(_ operations: [Int]) -> [String: Int] {
        Dictionary(uniqueKeysWithValues: zip(self.operationNames, operations))
    }
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

/// ``eventually(timeout:_:)`` with the timeout in seconds, as `StressTimerPool` calls it.
func eventually(seconds: Double, _ condition: () -> Bool) -> Bool {
    MetronomeTestSupport.eventually(timeout: .seconds(seconds), condition)
}
