import ArgumentParser
@preconcurrency import Dispatch
import Foundation
import Metronome
import MetronomeMeasurements
import MetronomeWorkloads

/// What `metronome scale` measures.
enum ScaleWorkload: String, ExpressibleByArgument, CaseIterable {
    /// A million armed timers: add, cancel, reschedule, memory and firing.
    case timers
    /// A million live session timeouts touched at random from every core.
    case sessions
}

/// `metronome scale --workload sessions`: `values` live sessions (lifetime 30 s) touched at
/// random (or in creation order), from one thread and then from every core, with a tenth
/// more left to expire during the run; once as `ExpiringValue`s on the engine, once the way
/// Swift code does it on GCD.
struct SessionsWorkload {
    let config: SessionsConfiguration

    init(values: Int, operations: Int, seed: UInt64, order: AccessOrder) {
        self.config = SessionsConfiguration(
            values: values, operations: operations, lifetimeNanoseconds: 30_000_000_000,
            expiring: max(values / 10, 1), expiringLifetimeNanoseconds: 1_000_000_000, seed: seed, order: order)
    }

    func run(json: Bool) throws {
        let startedAt = Date()
        let progress = Terminal.progress(quiet: json)
        progress?("scale: sessions on ExpiringValue…")
        let engine = try TimerEngine()
        defer { engine.syncShutdown() }
        let expiring = try SessionsProbe(name: "expiring-value", config: self.config) { id, lifetime, log in
            guard let log else { return ExpiringValue(id, lifetime: .nanoseconds(lifetime), backend: .engine(engine)) }
            return ExpiringValue(id, lifetime: .nanoseconds(lifetime), backend: .engine(engine)) { log.record($0) }
        }.run()
        progress?("scale: sessions on GCD work items…")
        // Serial, as the idiom's state is usually guarded; it also keeps the log one writer.
        let queue = DispatchQueue(label: "metronome.scale.sessions")
        let gcd = try SessionsProbe(name: "gcd-work-item", config: self.config) { id, lifetime, log in
            DispatchSession(id: id, lifetime: lifetime, queue: queue) { log?.record($0) }
        }.run()
        let results = [expiring, gcd]
        let notes = [
            "touches pick \(self.config.order.phrase) among \(self.config.values) sessions; all cores = \(OptionRules.cpuCount) threads",
            "read/s = isExpired on one thread, picked as the touches are: reaching a session, which each touch does too",
            "each rate is the best of \(ScaleProbe.repeats) runs",
            "gcd-work-item: each touch cancels the pending DispatchWorkItem and asyncAfter's a new one, under an NSLock",
            "bytes_per_value = resident memory growth (after malloc_trim) / live sessions, before any touch",
            "expiries: the \(self.config.expiring) sessions of \(self.config.expiringLifetimeNanoseconds / 1_000_000) ms, half of them touched once; "
                + "lateness from the clock read before the last touch, so early counts only true early expiries",
        ]
        let report = Report(
            command: "scale", invocation: .finished(startedAt: startedAt), config: self.config, machine: .current(),
            results: results, notes: notes)
        try Terminal.show(
            report, json: json,
            settings: "sessions: \(self.config.values) values, \(self.config.operations) touches",
            tables: [Self.table(results)])
    }

    static func table(_ results: [SessionsResult]) -> String {
        let gcd = results.first { $0.backend == "gcd-work-item" }
        func ratio(_ value: Double, _ base: Double?) -> String {
            guard let base, base > 0 else { return "-" }
            return NumberText.fixed(value / base, places: 1) + "×"
        }
        func whole(_ value: Double) -> String { NumberText.fixed(value, places: 0) }
        let header = [
            "backend", "values", "touch/s", "(all cores)", "read/s", "bytes/value", "expiring", "expired once", "twice",
            "never",
            "early", "p50 µs", "p99 µs", "touch×gcd", "(all cores)×gcd",
        ]
        let rows = results.map { r in
            [
                r.backend, "\(r.values)", whole(r.touchesPerSecond), whole(r.touchesPerSecondAllCores),
                whole(r.readsPerSecond),
                NumberText.fixed(r.bytesPerValue, places: 1), "\(r.expiring)", "\(r.expiredOnce)",
                "\(r.expiredMoreThanOnce)", "\(r.neverExpired)", "\(r.early)",
                NumberText.fixed(r.p50LatenessMicroseconds, places: 1),
                NumberText.fixed(r.p99LatenessMicroseconds, places: 1),
                ratio(r.touchesPerSecond, gcd?.touchesPerSecond),
                ratio(r.touchesPerSecondAllCores, gcd?.touchesPerSecondAllCores),
            ]
        }
        return ResultTable.render(header: header, rows: rows)
    }
}
