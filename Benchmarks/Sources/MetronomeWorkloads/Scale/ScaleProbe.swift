internal import CMeasurements
import Foundation
import MetronomeMeasurements

/// Measurements every subject shares: throughput of a loop, resident memory, threads.
public enum ScaleProbe {
    /// Each rate is measured this many times and the best kept, for every backend alike:
    /// on a shared machine noise only ever slows a run down, so the fastest of a few is the
    /// closest to the code's own cost.
    public static let repeats = 3

    /// Operations per second of `body(i)` for `i` in `0..<count`: the best of ``repeats``.
    static func rate(_ count: Int, _ body: (Int) -> Void) -> Double {
        (0..<self.repeats).map { _ in
            let start = MonotonicTime.now()
            for index in 0..<count { body(index) }
            return Double(count) / (Double(MonotonicTime.now() - start) / 1e9)
        }.max()!
    }

    /// A rate measured under a time limit.
    struct LimitedRate: Sendable, Equatable {
        /// Operations per second, or `nil` when a run did not finish within the limit.
        var perSecond: Double?
        /// Operations done by the run the limit stopped, or all of them.
        var done: Int
    }

    /// As ``rate(_:_:)``, but each run stops once `limitNanoseconds` have passed, and then
    /// the rate is "did not finish": for operations whose cost grows with what is armed, so
    /// that a large count reports rather than hangs. `drain(deadline)` runs after each run's
    /// operations, inside its time, and returns `false` if what they started was not done by
    /// `deadline`.
    static func rate(
        _ count: Int, limitNanoseconds: Int64, _ body: (Int) -> Void, drain: (_ deadline: Int64) -> Bool = { _ in true }
    ) -> LimitedRate {
        var best = 0.0
        for _ in 0..<self.repeats {
            let start = MonotonicTime.now()
            let deadline = start + limitNanoseconds
            for index in 0..<count {
                body(index)
                // Reading the clock every operation would add its own cost to cheap ones.
                if index % 64 == 63, MonotonicTime.now() > deadline {
                    return LimitedRate(perSecond: nil, done: index + 1)
                }
            }
            guard drain(deadline) else { return LimitedRate(perSecond: nil, done: count) }
            best = max(best, Double(count) / (Double(MonotonicTime.now() - start) / 1e9))
        }
        return LimitedRate(perSecond: best, done: count)
    }

    /// Total operations per second of `threads` threads each running `perThread(thread)`:
    /// the best of ``repeats``, each on threads of its own. Thread k runs on the k-th CPU
    /// this process may use, as a server pins a worker per core, so that no two of them
    /// ever share a CPU while a third stands idle.
    static func rate(
        threads: Int, operationsPerThread: Int, _ perThread: @escaping @Sendable (Int) -> Void
    ) throws(MeasurementError) -> Double {
        let cpus = CPUList.allowed?.cpus ?? []
        var best = 0.0
        for _ in 0..<self.repeats {
            let start = MonotonicTime.now()
            let workers = try (0..<threads).map { thread throws(MeasurementError) in
                try PosixThread.spawn(cpu: cpus.isEmpty ? nil : cpus[thread % cpus.count]) { perThread(thread) }
            }
            workers.forEach { $0.join() }
            best = max(best, Double(threads * operationsPerThread) / (Double(MonotonicTime.now() - start) / 1e9))
        }
        return best
    }

    /// Resident memory of this process, from /proc/self/statm, after handing the pages
    /// earlier phases freed back to the kernel (glibc's `malloc_trim`), so that reusing them
    /// does not hide growth.
    static func residentBytes() -> Int {
        malloc_trim(0)
        guard let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8),
            let pages = statm.split(separator: " ").dropFirst().first.flatMap({ Int($0) })
        else { return 0 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    /// When the fire phase's first deadline falls: late enough that every timer is armed
    /// before it, so arming never races firing (a timer armed after its deadline would
    /// fire late and out of order). The lead is twice the arming time at `armingRate`,
    /// the rate this backend just showed, so a slow build (a sanitizer) gets a longer one.
    static func fireStart(timers: Int, armingRate: Double) -> Int64 {
        let arming = Double(timers) / max(armingRate, 1) * 1e9
        return MonotonicTime.now() + 200_000_000 + Int64(min(2 * arming, 600e9))
    }

    /// A fire-phase deadline: `first`, plus a random offset within the window.
    static func fireDeadline(after first: Int64, _ config: ScaleConfiguration, _ random: inout SplitMix64) -> Int64 {
        first + (config.fireWindowNanoseconds > 0 ? random.next(below: config.fireWindowNanoseconds) : 0)
    }

    /// A far-future deadline (an hour or two from `base`), so nothing fires while measuring.
    static func farDeadline(_ random: inout SplitMix64, base: Int64) -> Int64 {
        base + 3_600_000_000_000 + random.next(below: 3_600_000_000_000)
    }

    /// The rates of moving armed timers, the one `config.order` picks among `count` each
    /// time: to a random ``farDeadline(_:base:)`` (`reschedule`), and to deadlines that only
    /// move later (`later`). `move(index, deadline)`, which moves timer `index`, is what each
    /// loop measures.
    static func rescheduleRates(
        _ operations: Int, among count: Int, _ config: ScaleConfiguration, base: Int64, random: inout SplitMix64,
        move: (Int, Int64) -> Void
    ) -> (reschedule: Double, later: Double) {
        var picks = config.order.picks(among: count, seed: config.seed)
        let reschedule = self.rate(operations) { _ in move(picks.next(), self.farDeadline(&random, base: base)) }
        var later = LaterDeadlines(base: base)
        let rescheduleLater = self.rate(operations) { _ in move(picks.next(), later.next()) }
        return (reschedule, rescheduleLater)
    }

    /// Deadlines that only move later, as an idle timeout's do when each request pushes it
    /// to now + lifetime: each one past every ``farDeadline(_:base:)`` and every earlier one.
    struct LaterDeadlines {
        private var last: Int64

        init(base: Int64) {
            self.last = base + 7_200_000_000_000
        }

        mutating func next() -> Int64 {
            self.last += 1
            return self.last
        }
    }

    static func result(
        _ name: String, timers: Int, addCancel: Double, allCores: Double?, reschedule: Double?, later: Double?,
        bytes: Double, log: FireLog, firstDeadline: Int64
    ) -> ScaleResult {
        let summary = log.summary(firstDeadlineNanoseconds: firstDeadline)
        return ScaleResult(
            backend: name, timers: timers, addCancelPerSecond: addCancel, addCancelPerSecondAllCores: allCores,
            reschedulePerSecond: reschedule, rescheduleLaterPerSecond: later, bytesPerTimer: bytes,
            fired: summary.latency.samples,
            firesPerSecond: summary.firesPerSecond, outOfOrder: summary.outOfOrder,
            early: summary.latency.early, p50LatenessMicroseconds: summary.latency.p50Microseconds,
            p99LatenessMicroseconds: summary.latency.p99Microseconds
        )
    }
}
