import ArgumentParser
import Foundation
import Metronome
import MetronomeMeasurements
import MetronomeWorkloads

/// `metronome scale`: a million armed timers — add, cancel, reschedule, memory and firing —
/// for the C core, the Swift API on the engine, and GCD; then add+cancel with fewer armed
/// for the engine, swift-nio's loop and a sleeping `Task` per timeout, each pair making a
/// timer of its own or rearming one.
struct ScaleCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "scale",
        abstract:
            "Add+cancel, reschedule, memory per timer and fire throughput with many timers armed; the engine, NIO and Task.sleep at fewer."
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

    /// NIO's cancel searches its heap linearly, so its pairs are measured at counts a loop
    /// holds, with a time limit, rather than at `--timers`.
    @Option(
        help:
            "Timers armed per engine and NIO loop (and tasks left sleeping) for the armed-count table, comma-separated, each 1 to 1000000."
    )
    var armed: String = "1000,10000,100000"

    @Option(
        name: .customLong("armed-operations"),
        help: "Add+cancel pairs per run of the armed-count table, 1 to 100000000.")
    var armedOperations: Int = 20_000

    @Option(
        name: .customLong("time-limit"),
        help: "Seconds one run of the armed-count table may take before it is reported as not finished, 0.001 to 3600."
    )
    var timeLimit: Double = 10

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
        try OptionRules.check(self.armedOperations, "--armed-operations", in: 1...100_000_000)
        try OptionRules.check(self.timeLimit, "--time-limit", in: 0.001...3600, unit: "s")
        _ = try self.armedCounts
    }

    /// `--armed` as counts, each in range.
    private var armedCounts: [Int] {
        get throws {
            try self.armed.split(separator: ",", omittingEmptySubsequences: false).map { text in
                guard let count = Int(text) else {
                    throw ValidationError("--armed: '\(text)' is not a count; give counts such as 1000,10000")
                }
                try OptionRules.check(count, "--armed", in: 1...1_000_000)
                return count
            }
        }
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
            shards: self.shards, order: self.order, armed: try self.armedCounts, armedOperations: self.armedOperations,
            timeLimitNanoseconds: OptionConversion.nanoseconds(self.timeLimit, nanosecondsPerUnit: 1e9)
        )
        let subjects: [any ScaleSubject] = [CoreScaleSubject(), SwiftScaleSubject(), DispatchScaleSubject()]
        let progress = Terminal.progress(quiet: self.json)
        let results = try subjects.map { subject in
            progress?("scale: \(subject.name)…")
            return try subject.run(config)
        }
        let armedSubjects: [any ArmedScaleSubject] = [
            EngineArmedScaleSubject(), EventLoopScaleSubject(), SleepingTaskScaleSubject(),
        ]
        let armedResults = try armedSubjects.flatMap { subject in
            progress?("scale: \(subject.name) at \(self.armed) armed…")
            return try subject.run(config)
        }
        var notes = [
            "gcd runs \(self.gcdTimers) timers (one DispatchSource each) against \(self.timers) for the engine",
            "gcd add+cancel = make, schedule, activate and cancel a source: GCD cannot disarm one",
            "fires_per_s = timers fired / (last firing − earliest deadline); deadlines spread over \(self.fireWindow) ms",
            "bytes_per_timer = resident memory growth (after malloc_trim) / timers armed",
            "reschedules pick \(self.order.phrase) among the armed timers",
            "engines run \(self.shards) shard(s); all cores = \(OptionRules.cpuCount) threads, each arming a timer it created",
            "add+cancel reuses one timer per thread (core: one C timer; engine-swift: one SafeDispatchTimer)",
            "each rate is the best of \(ScaleProbe.repeats) runs",
        ]
        notes += self.armedNotes
        let report = Report(
            command: "scale", invocation: .finished(startedAt: startedAt), config: config, machine: .current(),
            results: results.map(ScaleRow.timers) + armedResults.map(ScaleRow.armed), notes: notes)
        try Terminal.show(
            report, json: self.json,
            settings: "\(self.timers) timers (gcd \(self.gcdTimers)), \(self.operations) operations; "
                + "armed-count table: \(self.armed) armed, \(self.armedOperations) pairs per run",
            tables: [Self.table(results), Self.armedTable(armedResults)])
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

extension ScaleCommand {
    /// How the armed-count table was measured.
    private var armedNotes: [String] {
        [
            "armed-count table: add+cancel pairs with \(self.armed) armed beside them, \(self.armedOperations) per run; "
                + "a run still going after \(NumberText.fixed(self.timeLimit, places: 3)) s stops and does not finish",
            "per pair: allocates = each pair makes a timer (or task) and drops it; reuses = each pair rearms one made before",
            "engine-new: a SafeDispatchTimer made, scheduled, cancelled and dropped per pair; "
                + "engine-reuse: one SafeDispatchTimer scheduled and cancelled; both from one thread",
            "nio-loop: scheduleTask + cancel on the loop's own thread (NIO's fast path); "
                + "nio-thread: the same from another thread, which takes the loop's lock and may wake it; "
                + "nio-callback: scheduleCallback with one handler + cancel from another thread",
            "nio: cancel removes the task from the loop's heap by a linear search, so its cost grows with the tasks armed",
            "task-sleep: a Task per timeout sleeping in Task.sleep(for:), made and cancelled from one thread; "
                + "a run ends when every cancelled task has finished",
            "armed-count bytes_per_timer = resident memory growth (after malloc_trim) / tasks armed, handles included",
        ]
    }

    static func armedTable(_ results: [ArmedScaleResult]) -> String {
        let header = ["backend", "armed", "per pair", "add+cancel/s", "bytes/timer"]
        let rows = results.map { r in
            [
                r.backend, "\(r.armed)", r.perPair.rawValue,
                r.addCancelPerSecond.map { NumberText.fixed($0, places: 0) }
                    ?? "did not finish (\(r.pairsDone) of \(r.pairs))",
                NumberText.fixed(r.bytesPerTimer, places: 1),
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
