import Foundation

/// What running a subject cost: wall time, CPU time and voluntary wake-ups.
///
/// ```swift
/// let (counters, cost) = try RunCost.measure(load: 2) { try subject.run(config, recorder: recorder) }
/// print(cost.cpuMillisecondsPer1k(firings: recorder.firings))
/// ```
public struct RunCost: Sendable, Equatable {
    /// Wall-clock duration of the run, in `CLOCK_MONOTONIC` nanoseconds.
    public var elapsedNanoseconds: Int64
    /// Process CPU time (user + system) during the run, load threads excluded.
    public var cpuNanoseconds: Int64
    /// Voluntary context switches of the process during the run.
    public var voluntaryWakeups: Int

    /// Creates a cost from its fields.
    public init(elapsedNanoseconds: Int64, cpuNanoseconds: Int64, voluntaryWakeups: Int) {
        self.elapsedNanoseconds = elapsedNanoseconds
        self.cpuNanoseconds = cpuNanoseconds
        self.voluntaryWakeups = voluntaryWakeups
    }

    /// Checks what every runner checks before its first subject, and creates the directory
    /// histograms go to.
    ///
    /// - Throws: ``MeasurementError`` for a negative load; the error of creating the directory.
    static func prepare(load: Int, hgrmDirectory: String?) throws {
        guard load >= 0 else { throw MeasurementError.invalidConfiguration("load must not be negative") }
        if let hgrmDirectory {
            try FileManager.default.createDirectory(atPath: hgrmDirectory, withIntermediateDirectories: true)
        }
    }

    /// Runs `body` with `load` ``BusyLoad`` threads spinning beside it and measures its cost.
    ///
    /// The load starts before and stops after the measured span, and its threads' CPU time is
    /// left out, so only the subject is charged.
    ///
    /// - Parameters:
    ///   - load: Busy threads to run alongside; 0 for none.
    ///   - body: The run to measure.
    /// - Returns: What `body` returned, and its cost.
    /// - Throws: What `body` throws, or ``MeasurementError`` if the load cannot start.
    public static func measure<Value>(load: Int, _ body: () throws -> Value) throws -> (Value, RunCost) {
        let busy = BusyLoad()
        defer { busy.stop() }
        try busy.start(threads: load)
        let loadThreads = busy.threadIDs
        let cpuBefore = ProcessCPUTime.nanoseconds(excluding: loadThreads)
        let wakeupsBefore = VoluntaryWakeups.count()
        let startedAt = MonotonicTime.now()
        let value = try body()
        let elapsed = MonotonicTime.now() - startedAt
        let cost = RunCost(
            elapsedNanoseconds: elapsed,
            cpuNanoseconds: ProcessCPUTime.nanoseconds(excluding: loadThreads) - cpuBefore,
            voluntaryWakeups: VoluntaryWakeups.count() - wakeupsBefore
        )
        return (value, cost)
    }

    /// The cost of two runs together.
    public static func + (lhs: RunCost, rhs: RunCost) -> RunCost {
        RunCost(
            elapsedNanoseconds: lhs.elapsedNanoseconds + rhs.elapsedNanoseconds,
            cpuNanoseconds: lhs.cpuNanoseconds + rhs.cpuNanoseconds,
            voluntaryWakeups: lhs.voluntaryWakeups + rhs.voluntaryWakeups
        )
    }

    /// `count` events per second of ``elapsedNanoseconds``; 0 for an empty run.
    public func perSecond(_ count: Int) -> Double {
        guard self.elapsedNanoseconds > 0 else { return 0 }
        return Double(count) * 1e9 / Double(self.elapsedNanoseconds)
    }

    /// CPU milliseconds per 1000 of `firings`; 0 when nothing fired.
    public func cpuMillisecondsPer1k(firings: Int) -> Double {
        guard firings > 0 else { return 0 }
        return Double(self.cpuNanoseconds) / 1e6 / (Double(firings) / 1_000)
    }
}
