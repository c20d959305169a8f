import ArgumentParser
@preconcurrency import Dispatch
import Foundation
import Metronome
import MetronomeMeasurements

/// What `metronome scale` measures.
enum ScaleWorkload: String, ExpressibleByArgument, CaseIterable {
    /// A million armed timers: add, cancel, reschedule, memory and firing.
    case timers
    /// A million live session timeouts touched at random from every core.
    case sessions
}

/// `metronome scale --workload sessions`: `values` live sessions (lifetime 30 s) touched at
/// random, from one thread and then from every core, with a tenth more left to expire during
/// the run; once as `ExpiringValue`s on the engine, once the way Swift code does it on GCD.
struct SessionsWorkload {
    let config: SessionsConfiguration

    init(values: Int, operations: Int, seed: UInt64) {
        self.config = SessionsConfiguration(
            values: values, operations: operations, lifetimeNanoseconds: 30_000_000_000,
            expiring: max(values / 10, 1), expiringLifetimeNanoseconds: 1_000_000_000, seed: seed)
    }

    func run(json: Bool) throws {
        let startedAt = Date()
        let progress = Terminal.progress(quiet: json)
        progress?("scale: sessions on ExpiringValue…")
        let engine = try TimerEngine()
        defer { engine.shutdown() }
        let expiring = SessionsProbe(name: "expiring-value", config: self.config) { id, lifetime, log in
            guard let log else { return ExpiringValue(id, lifetime: .nanoseconds(lifetime), engine: engine) }
            return ExpiringValue(id, lifetime: .nanoseconds(lifetime), engine: engine) { log.record($0) }
        }.run()
        progress?("scale: sessions on GCD work items…")
        // Serial, as the idiom's state is usually guarded; it also keeps the log one writer.
        let queue = DispatchQueue(label: "metronome.scale.sessions")
        let gcd = SessionsProbe(name: "gcd-work-item", config: self.config) { id, lifetime, log in
            DispatchSession(id: id, lifetime: lifetime, queue: queue) { log?.record($0) }
        }.run()
        let results = [expiring, gcd]
        let notes = [
            "touches hit random sessions among \(self.config.values); all cores = \(OptionRules.cpuCount) threads",
            "gcd-work-item: each touch cancels the pending DispatchWorkItem and asyncAfter's a new one, under an NSLock",
            "bytes_per_value = resident memory growth (after malloc_trim) / live sessions, before any touch",
            "expiries: the \(self.config.expiring) sessions of \(self.config.expiringLifetimeNanoseconds / 1_000_000) ms, half of them touched once; "
                + "lateness from the clock read before the last touch, so early counts only true early expiries",
        ]
        let report = Report(
            command: "scale", invocation: .finished(startedAt: startedAt), config: self.config, machine: .current(),
            results: results, notes: notes)
        if json {
            print(try report.jsonString())
        } else {
            Terminal.printHeader(
                report.machine, config: "sessions: \(self.config.values) values, \(self.config.operations) touches")
            print(Self.table(results))
            notes.forEach { print("note: \($0)") }
        }
    }

    static func table(_ results: [SessionsResult]) -> String {
        let gcd = results.first { $0.backend == "gcd-work-item" }
        func ratio(_ value: Double, _ base: Double?) -> String {
            guard let base, base > 0 else { return "-" }
            return NumberText.fixed(value / base, places: 1) + "×"
        }
        func whole(_ value: Double) -> String { NumberText.fixed(value, places: 0) }
        let header = [
            "backend", "values", "touch/s", "(all cores)", "bytes/value", "expiring", "expired once", "twice", "never",
            "early", "p50 µs", "p99 µs", "touch×gcd", "(all cores)×gcd",
        ]
        let rows = results.map { r in
            [
                r.backend, "\(r.values)", whole(r.touchesPerSecond), whole(r.touchesPerSecondAllCores),
                NumberText.fixed(r.bytesPerValue, places: 1), "\(r.expiring)", "\(r.expiredOnce)",
                "\(r.expiredMoreThanOnce)", "\(r.neverExpired)", "\(r.early)",
                NumberText.fixed(r.p50LatenessMicroseconds, places: 1), NumberText.fixed(r.p99LatenessMicroseconds, places: 1),
                ratio(r.touchesPerSecond, gcd?.touchesPerSecond),
                ratio(r.touchesPerSecondAllCores, gcd?.touchesPerSecondAllCores),
            ]
        }
        return ResultTable.render(header: header, rows: rows)
    }
}

/// A session timeout that a request prolongs.
protocol TouchableSession: AnyObject, Sendable {
    /// Starts a new lifetime; `false` if the session had already expired.
    func touch() -> Bool
}

extension ExpiringValue: TouchableSession {}

/// One implementation's run of the workload.
struct SessionsProbe<Session: TouchableSession> {
    let name: String
    let config: SessionsConfiguration
    /// Makes session `id` living `lifetime` nanoseconds; with a log, its expiry is
    /// recorded there.
    let make: (_ id: Int, _ lifetime: Int64, _ log: ExpiryLog?) -> Session

    func run() -> SessionsResult {
        let n = self.config.values, ops = self.config.operations
        var random = SplitMix64(seed: self.config.seed)

        let before = ScaleProbe.residentBytes()
        let live = (0..<n).map { self.make($0, self.config.lifetimeNanoseconds, nil) }
        let bytes = Double(ScaleProbe.residentBytes() - before) / Double(n)

        // The share that expires while the touches run; every other one is touched once, so
        // its timer finds a later expiry than it was armed for.
        let log = ExpiryLog(expected: self.config.expiring)
        let lifetime = self.config.expiringLifetimeNanoseconds
        var deadlines = [Int64](repeating: 0, count: self.config.expiring)
        let expiring = (0..<self.config.expiring).map { id in
            deadlines[id] = MonotonicTime.now() + lifetime
            return self.make(id, lifetime, log)
        }
        for id in stride(from: 0, to: expiring.count, by: 2) {
            let touchedAt = MonotonicTime.now()
            if expiring[id].touch() { deadlines[id] = touchedAt + lifetime }
        }

        let oneThread = ScaleProbe.rate(ops) { _ in
            _ = live[Int(random.next(below: Int64(n)))].touch()
        }
        let threads = OptionRules.cpuCount
        let allCores = ScaleProbe.rate(threads: threads, operationsPerThread: ops / threads) { thread in
            var random = SplitMix64(seed: UInt64(thread) &+ 99)
            for _ in 0..<(ops / threads) {
                _ = live[Int(random.next(below: Int64(n)))].touch()
            }
        }
        log.waitUntilComplete(timeoutSeconds: 60)
        // Give a wrong second expiry the time to show up.
        usleep(100_000)
        let expiries = log.summary(deadlines: deadlines)
        withExtendedLifetime((live, expiring)) {}
        return SessionsResult(
            backend: self.name, values: n, touchesPerSecond: oneThread, touchesPerSecondAllCores: allCores,
            bytesPerValue: bytes, expiring: self.config.expiring, expiredOnce: expiries.once,
            expiredMoreThanOnce: expiries.moreThanOnce, neverExpired: expiries.never, early: expiries.latency.early,
            p50LatenessMicroseconds: expiries.latency.p50Microseconds,
            p99LatenessMicroseconds: expiries.latency.p99Microseconds)
    }
}

/// A session timeout the way Swift code keeps one on GCD today: each touch cancels the
/// pending `DispatchWorkItem` and schedules a new one with `asyncAfter`. The generation
/// check makes it exactly-once: a cancelled item that already started does nothing.
final class DispatchSession: TouchableSession, @unchecked Sendable {
    private let lock = NSLock()
    private var alive = true
    private var generation: UInt64 = 0
    private var pending: DispatchWorkItem?
    private let id: Int
    private let lifetime: DispatchTimeInterval
    private let queue: DispatchQueue
    private let onExpiry: @Sendable (Int) -> Void

    init(id: Int, lifetime: Int64, queue: DispatchQueue, onExpiry: @escaping @Sendable (Int) -> Void) {
        self.id = id
        self.lifetime = .nanoseconds(Int(lifetime))
        self.queue = queue
        self.onExpiry = onExpiry
        _ = self.touch()
    }

    func touch() -> Bool {
        self.lock.lock()
        guard self.alive else {
            self.lock.unlock()
            return false
        }
        self.pending?.cancel()
        self.generation += 1
        let generation = self.generation
        let item = DispatchWorkItem { [weak self] in self?.expire(generation: generation) }
        self.pending = item
        self.lock.unlock()
        self.queue.asyncAfter(deadline: .now() + self.lifetime, execute: item)
        return true
    }

    private func expire(generation: UInt64) {
        self.lock.lock()
        guard self.alive, self.generation == generation else {
            self.lock.unlock()
            return
        }
        self.alive = false
        self.pending = nil
        self.lock.unlock()
        self.onExpiry(self.id)
    }
}
