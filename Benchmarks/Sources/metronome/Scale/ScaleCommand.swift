import ArgumentParser
import Foundation
import Metronome
import MetronomeMeasurements
import MetronomeWorkloads

/// `metronome scale`: a million armed timers — add, cancel, reschedule, memory and firing —
/// for the C core, the Swift API on the engine, and GCD.
struct ScaleCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "scale",
        abstract: "Add+cancel, reschedule, memory per timer and fire throughput with many timers armed."
    )

    @Option(
        help:
            "timers: add, cancel, reschedule, memory and firing; sessions: ExpiringValue touched from every core against GCD work items."
    )
    var workload: ScaleWorkload = .timers

    @Option(
        help:
            "Timers armed for the core and the Swift API (sessions: live values for both), 1 to 10000000 (and 1 KB each of this machine's memory)."
    )
    var timers: Int = 1_000_000

    @Option(
        name: .customLong("gcd-timers"),
        help: "Timers for GCD (a kernel-visible source each: kept smaller), 1 to 1000000.")
    var gcdTimers: Int = 100_000

    @Option(help: "Add+cancel pairs and reschedules measured per backend (all cores: per thread), 1 to 100000000.")
    var operations: Int = 2_000_000

    /// Short enough that the burst outruns every backend, so `fires/s` measures how fast
    /// each drains it rather than how fast deadlines arrive (a million over 1 s arrive at
    /// 1M/s, whoever fires them); random, so the timers are reached in random order.
    @Option(
        name: .customLong("fire-window"),
        help: "The fire phase's deadlines are spread at random over this many ms (0: one instant), up to 60000.")
    var fireWindow: Double = 10

    @Option(help: "Seed of the random deadlines.")
    var seed: UInt64 = 1

    /// At random by default, as requests reach their timers; in creation order the
    /// prefetcher hides the cache miss of reaching each, which leaves the operation's own
    /// cost at that many timers.
    @Option(help: "Which timers the reschedules (sessions: touches) pick: at random, or in the order they were made.")
    var order: AccessOrder = .random

    /// One per CPU by default: the all-cores column measures threads arming their own
    /// timers, which a sharded engine lets them do without sharing a lock.
    @Option(
        help:
            "Shards of the engines under test (TimerEngine.Configuration.shards), 1 to \(TimerEngine.Configuration.maximumShards); default one per CPU."
    )
    var shards: Int = min(ProcessInfo.processInfo.activeProcessorCount, TimerEngine.Configuration.maximumShards)

    @Flag(help: "Print JSON instead of a table.")
    var json = false

    /// Memory each armed timer may take, for the cap on `--timers`: the Swift API took 433
    /// bytes per timer, GCD 520, and the run keeps arrays of ids and deadlines beside them.
    static let bytesPerTimerBudget = 1024

    func validate() throws {
        let memoryBytes = Int(sysconf(Int32(_SC_PHYS_PAGES))) * Int(sysconf(Int32(_SC_PAGESIZE)))
        let mostTimers = min(10_000_000, max(1, memoryBytes / Self.bytesPerTimerBudget))
        try OptionRules.check(self.timers, "--timers", in: 1...mostTimers)
        try OptionRules.check(self.gcdTimers, "--gcd-timers", in: 1...min(1_000_000, mostTimers))
        try OptionRules.check(self.operations, "--operations", in: 1...100_000_000)
        try OptionRules.check(self.fireWindow, "--fire-window", in: 0...60_000, unit: "ms")
        try OptionRules.check(self.shards, "--shards", in: 1...TimerEngine.Configuration.maximumShards)
    }

    func run() throws {
        guard self.workload == .timers else {
            return try SessionsWorkload(
                values: self.timers, operations: self.operations, seed: self.seed, order: self.order
            )
            .run(json: self.json)
        }
        let startedAt = Date()
        let config = ScaleConfiguration(
            timers: self.timers, gcdTimers: self.gcdTimers, operations: self.operations,
            fireWindowNanoseconds: OptionConversion.nanoseconds(self.fireWindow, nanosecondsPerUnit: 1e6),
            seed: self.seed,
            shards: self.shards, order: self.order
        )
        let subjects: [any ScaleSubject] = [CoreScaleSubject(), SwiftScaleSubject(), DispatchScaleSubject()]
        let progress = Terminal.progress(quiet: self.json)
        let results = try subjects.map { subject in
            progress?("scale: \(subject.name)…")
            return try subject.run(config)
        }
        let notes = [
            "gcd runs \(self.gcdTimers) timers (one DispatchSource each) against \(self.timers) for the engine",
            "gcd add+cancel = make, schedule, activate and cancel a source: GCD cannot disarm one",
            "fires_per_s = timers fired / (last firing − earliest deadline); deadlines spread over \(self.fireWindow) ms",
            "bytes_per_timer = resident memory growth (after malloc_trim) / timers armed",
            "reschedules pick \(self.order.phrase) among the armed timers",
            "engines run \(self.shards) shard(s); all cores = \(OptionRules.cpuCount) threads, each arming a timer it created",
            "each rate is the best of \(ScaleProbe.repeats) runs",
        ]
        let report = Report(
            command: "scale", invocation: .finished(startedAt: startedAt), config: config, machine: .current(),
            results: results, notes: notes)
        try Terminal.show(
            report, json: self.json,
            settings: "\(self.timers) timers (gcd \(self.gcdTimers)), \(self.operations) operations",
            tables: [Self.table(results)])
    }

    static func table(_ results: [ScaleResult]) -> String {
        let gcd = results.first { $0.backend == "gcd" }
        func ratio(_ value: Double?, _ base: Double?) -> String {
            guard let value, let base, base > 0 else { return "-" }
            return NumberText.fixed(value / base, places: 1) + "×"
        }
        func whole(_ value: Double?) -> String { value.map { NumberText.fixed($0, places: 0) } ?? "-" }
        let header = [
            "backend", "timers", "add+cancel/s", "(all cores)", "all÷one", "reschedule/s", "later/s", "bytes/timer",
            "fires/s",
            "out-of-order", "early", "p50 µs", "p99 µs", "add+cancel×gcd", "reschedule×gcd", "later×gcd", "bytes×gcd",
            "fires×gcd",
        ]
        let rows = results.map { r in
            [
                r.backend, "\(r.timers)", whole(r.addCancelPerSecond), whole(r.addCancelPerSecondAllCores),
                ratio(r.addCancelPerSecondAllCores, r.addCancelPerSecond),
                whole(r.reschedulePerSecond), whole(r.rescheduleLaterPerSecond),
                NumberText.fixed(r.bytesPerTimer, places: 1),
                whole(r.firesPerSecond),
                "\(r.outOfOrder)", "\(r.early)", NumberText.fixed(r.p50LatenessMicroseconds, places: 1),
                NumberText.fixed(r.p99LatenessMicroseconds, places: 1),
                ratio(r.addCancelPerSecond, gcd?.addCancelPerSecond),
                ratio(r.reschedulePerSecond, gcd?.reschedulePerSecond),
                ratio(r.rescheduleLaterPerSecond, gcd?.rescheduleLaterPerSecond),
                ratio(r.bytesPerTimer, gcd?.bytesPerTimer), ratio(r.firesPerSecond, gcd?.firesPerSecond),
            ]
        }
        return ResultTable.render(header: header, rows: rows)
    }
}

extension AccessOrder: ExpressibleByArgument {
    /// How a note names the order.
    var phrase: String {
        switch self {
        case .random: "at random"
        case .creation: "in creation order"
        }
    }
}
