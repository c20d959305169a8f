import ArgumentParser
import Foundation
import MetronomeMeasurements
import MetronomeWorkloads

/// `metronome stress`: random operations from many threads on pools of `SafeDispatchTimer`s
/// (engine and GCD backends), on `TimerScheduler` ids and on `ExpiringValue`s, under load,
/// with the library's guarantees checked at every handler entry and at the end.
///
/// Checked as it runs: no handler after `cancelAndWait()` returned; at most the one in-flight
/// handler after `cancel()`, `suspend()` or `reschedule` returned `true`; none before its
/// deadline, nor for a deadline never armed; a one-shot at most once per schedule; repeating
/// ticks whose `missed` matches their lateness and whose sequence advances by `missed + 1`;
/// handlers of one timer never overlapping. At the end: every handler context released, the
/// engines' counters consistent with what handlers saw and nothing left armed, and every
/// scheduler id with exactly one terminal event, and every value expired at most once, never
/// early and never after an invalidation that won. The edges of an engine's life (calls
/// racing its shutdown, its timerfds closed under it, a fork in a release callback, processes
/// spawned from handlers) run where a hang is bounded. Exits with status 1 on any violation.
struct StressCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stress",
        abstract: "Random schedule/reschedule/suspend/resume/cancel/drop from many threads, invariants checked."
    )

    @Option(help: "Threads performing random operations, 1 to 256.")
    var threads: Int = 8

    @Option(
        name: [.customShort("D"), .long],
        help: "Run this long: 90, 500ms, 1m, 2h, at most 1d (default 10 s unless --ops is given).")
    var duration: TimeSpan?

    @Option(help: "Stop after this many operations in total, 1 to 10000000000.")
    var ops: Int?

    @Option(help: "Busy threads started for the run (default: twice the CPU count); at most 8 per CPU.")
    var load: Int?

    @Option(help: "Timers in each backend's pool (and values in the expiring-value pool), 1 to 100000.")
    var timers: Int = 64

    @Option(help: "Subjects, comma-separated: \(StressSubjects.names.joined(separator: ", ")).")
    var backends: String = StressSubjects.names.joined(separator: ",")

    @Option(help: "Seed of the random operations.")
    var seed: UInt64 = 1

    @Flag(help: "Print JSON instead of tables.")
    var json = false

    func validate() throws {
        try OptionRules.check(self.threads, "--threads", in: 1...256)
        if let duration = self.duration {
            try OptionRules.check(
                duration.seconds, "--duration", above: 0, upTo: OptionRules.longestRunSeconds, unit: "s")
        }
        if let ops = self.ops { try OptionRules.check(ops, "--ops", in: 1...10_000_000_000) }
        if let load = self.load { try OptionRules.checkLoad(load) }
        try OptionRules.check(self.timers, "--timers", in: 1...100_000)
        _ = try OptionRules.names(self.backends, "--backends", known: StressSubjects.names)
    }

    func run() throws {
        let startedAt = Date()
        let machine = MachineFacts.current()
        let load = self.load ?? 2 * machine.cpuCount
        let seconds = self.duration?.seconds ?? (self.ops == nil ? 10 : nil)
        let names = try OptionRules.names(self.backends, "--backends", known: StressSubjects.names)
        let violations = StressViolations()
        let subjects = try StressSubjects.make(names, timers: self.timers, violations: violations)

        let config = StressConfiguration(
            threads: self.threads, durationSeconds: seconds, operations: self.ops, load: load, timers: self.timers,
            backends: names, seed: self.seed
        )
        let runner = StressRunner(
            subjects: subjects, configuration: config, violations: violations,
            progress: Terminal.progress(quiet: self.json))
        guard let (rows, elapsed) = try runner.run() else {
            // A thread hangs inside the library: nothing can be joined or torn down.
            FileHandle.standardError.write(
                Data(("stress: STALL\n" + violations.examples.joined(separator: "\n") + "\n").utf8))
            Foundation.exit(2)
        }
        let results = rows + [StressResult.total(rows, seconds: elapsed)]
        let notes =
            [
                "handler-side operations: ~4% cancel, 1% cancelAndWait, 3% reschedule, 2% drop their own timer, 1% spin ≤ 0.2 ms",
                "one-shots 0–3 ms ahead, periods 0.5–3 ms, leeway 0; 40% of pooled timers repeat",
                "a race the shadow cannot order (overlapping arming calls) is not checked, never reported",
                "expiring-value: lifetimes 0–3 ms; create 20%, touch 50%, invalidate 10%, read 10%, release 10%",
                "lifecycle: per 100,000 operations 100 engine shutdowns under other threads, 90 handlers shutting down their engine, 90 dropping it, 40 pairs shutting down each other's, 20 forked children, 10 handlers forking, 10 busy timers beside neighbours on another clock and shard",
                "edges: per 100,000 operations 60 start(...) and 60 withDeadline racing a shutdown (4 threads or tasks each), 25 rounds of 32 one-shots due at once checked against counters.armed, 5 timerfd sweeps and 5 forks in a release callback (each in a child killed after 10 s), 5 processes spawned from a handler (SIGTERM must stop them within 2 s); the rest arm a one-shot due at once or cancel one",
            ]
            + (StressSubjects.forksChildren ? [] : ["lifecycle, edges: no forks under ThreadSanitizer"])
            + violations.examples.map { "violation: \($0)" }
        let report = Report(
            command: "stress", invocation: .finished(startedAt: startedAt), config: config, machine: machine,
            results: results, notes: notes)
        let budget = [seconds.map { "\($0) s" }, self.ops.map { "\($0) operations" }].compactMap { $0 }.joined(
            separator: " or ")
        try Terminal.show(
            report, json: self.json,
            settings:
                "\(self.threads) threads, \(budget), load \(load), \(self.timers) timers per pool, seed \(self.seed), ran \(String(format: "%.1f", elapsed)) s",
            tables: [StressTable.summary(results), StressTable.violations(results)])
        if results.last!.violationsTotal > 0 { throw ExitCode(1) }
    }
}
