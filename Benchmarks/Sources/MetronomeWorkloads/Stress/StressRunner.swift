import Glibc
import MetronomeMeasurements
import Synchronization

/// Runs the stress threads over the subjects until the time or operation budget is spent,
/// with busy threads for load, and watches for a thread that stops making progress.
public struct StressRunner {
    /// A thread's last completed operation, for the hang watchdog.
    private final class Heartbeat: Sendable {
        let time = Atomic<Int64>(0)
    }

    /// What the threads share.
    private final class Budget: Sendable {
        let endNanoseconds: Int64
        let operations: Int?
        let claimed = Atomic<Int>(0)
        let completed = Atomic<Int>(0)
        let stop = Atomic<Bool>(false)

        init(endNanoseconds: Int64, operations: Int?) {
            self.endNanoseconds = endNanoseconds
            self.operations = operations
        }

        /// Claims up to `batch` more operations; 0 once the budget is spent.
        func claim(_ batch: Int) -> Int {
            if self.stop.load(ordering: .relaxed) || MonotonicTime.now() >= self.endNanoseconds { return 0 }
            guard let operations = self.operations else { return batch }
            let before = self.claimed.add(batch, ordering: .relaxed).oldValue
            return max(0, min(batch, operations - before))
        }
    }

    /// A thread made no progress for this long: something hangs.
    static let stallSeconds: Int64 = 30

    let subjects: [any StressSubject]
    let configuration: StressConfiguration
    let violations: StressViolations
    let progress: ((String) -> Void)?

    /// Prepares a run; nothing starts until ``run()``.
    ///
    /// - Parameters:
    ///   - subjects: What the threads operate on, from ``StressSubjects/make(_:timers:violations:)``.
    ///   - configuration: Threads, load, seed and budgets. The run ends when the first of
    ///     `durationSeconds` and `operations` is spent, so give at least one.
    ///   - violations: Where the subjects record what they see broken.
    ///   - progress: Receives a progress line about once a second.
    public init(
        subjects: [any StressSubject], configuration: StressConfiguration, violations: StressViolations,
        progress: ((String) -> Void)?
    ) {
        self.subjects = subjects
        self.configuration = configuration
        self.violations = violations
        self.progress = progress
    }

    /// Runs the threads and then each subject's end-of-run checks.
    ///
    /// - Returns: One row per subject and the measured running time, or `nil` after a stall
    ///   (recorded in ``violations``), when the threads cannot be joined.
    public func run() throws -> (results: [StressResult], seconds: Double)? {
        let subjects = self.subjects
        let start = MonotonicTime.now()
        let threads = self.configuration.threads
        let limit = self.configuration.durationSeconds.map { start + Int64($0 * 1e9) } ?? .max
        let budget = Budget(endNanoseconds: limit, operations: self.configuration.operations)
        let heartbeats = (0..<threads).map { _ in Heartbeat() }
        let counts = LockedCondition(subjects.map { Array(repeating: 0, count: $0.operationNames.count) })
        let finished = LockedCondition(0)

        let load = BusyLoad()
        try load.start(threads: self.configuration.load)
        defer { load.stop() }

        var spawned: [PosixThread] = []
        for index in 0..<threads {
            let heartbeat = heartbeats[index]
            let seed = self.configuration.seed &+ UInt64(index) &* 0xD1B5_4A32_D192_ED03
            spawned.append(
                try PosixThread.spawn {
                    var random = SplitMix64(seed: seed)
                    var local = subjects.map { Array(repeating: 0, count: $0.operationNames.count) }
                    while true {
                        let batch = budget.claim(64)
                        if batch == 0 { break }
                        for _ in 0..<batch {
                            let subject = Int(random.next(below: Int64(subjects.count)))
                            local[subject][subjects[subject].step(&random)] += 1
                            heartbeat.time.store(MonotonicTime.now(), ordering: .relaxed)
                        }
                        budget.completed.add(batch, ordering: .relaxed)
                    }
                    counts.withLock { counts in
                        for subject in counts.indices {
                            for operation in counts[subject].indices {
                                counts[subject][operation] += local[subject][operation]
                            }
                        }
                    }
                    finished.withLock { $0 += 1 }
                    finished.broadcast()
                }
            )
        }

        var lastReport = start
        while !finished.wait(timeout: .milliseconds(200), until: { $0 == threads }) {
            let now = MonotonicTime.now()
            if now - lastReport >= 1_000_000_000 {
                lastReport = now
                let done = budget.completed.load(ordering: .relaxed)
                let rate = Double(done) / (Double(now - start) / 1e9)
                self.progress?(String(format: "stress: %d operations, %.0f ops/s", done, rate))
            }
            for (index, heartbeat) in heartbeats.enumerated() {
                let last = heartbeat.time.load(ordering: .relaxed)
                if last > 0, now - last > Self.stallSeconds * 1_000_000_000 {
                    self.violations.record(
                        .stall, subject: "all", "thread \(index) made no progress for \(Self.stallSeconds) s")
                    budget.stop.store(true, ordering: .relaxed)
                    return nil
                }
            }
        }
        for thread in spawned { thread.join() }
        let seconds = Double(MonotonicTime.now() - start) / 1e9
        load.stop()

        let totals = counts.withLock { $0 }
        var results: [StressResult] = []
        for (index, subject) in subjects.enumerated() {
            self.progress?("stress: final checks of \(subject.name)…")
            results.append(subject.finish(operations: totals[index], seconds: seconds))
        }
        return (results, seconds)
    }
}
