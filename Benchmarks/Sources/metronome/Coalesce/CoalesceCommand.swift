import ArgumentParser
import Foundation
import Metronome
import MetronomeMeasurements

/// `metronome coalesce`: how many wake-ups N one-shot timers with leeway cost, against the
/// offline optimum.
struct CoalesceCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "coalesce",
        abstract: "Wake-ups of one-shot timers with leeway, engine versus GCD and NIO, against the optimum."
    )

    @Option(help: "One-shot timers per backend, 1 to 1000000.")
    var timers: Int = 10_000

    @Option(help: "Window the deadlines are spread over, in milliseconds, 0.000001 (1 ns) to 3600000 (1 h).")
    var window: Double = 2000

    @Option(help: "Leeway of every timer, in milliseconds, 0 to 3600000.")
    var leeway: Double = 50

    @Option(help: "Seed of the deadlines (the same for every backend).")
    var seed: UInt64 = 1

    @Option(help: "Busy threads started for the run; at most 8 per CPU.")
    var load: Int = 0

    @Option(help: "Write an HdrHistogram percentile file of lateness per backend into this directory.")
    var hgrm: String?

    @Flag(help: "Print JSON instead of a table.")
    var json = false

    func validate() throws {
        try OptionRules.check(self.timers, "--timers", in: 1...1_000_000)
        try OptionRules.check(self.window, "--window", in: 0.000_001...3_600_000, unit: "ms")
        try OptionRules.check(self.leeway, "--leeway", in: 0...3_600_000, unit: "ms")
        try OptionRules.checkLoad(self.load)
        if let hgrm = self.hgrm, hgrm.isEmpty { throw ValidationError("--hgrm needs a directory") }
    }

    func run() throws {
        let startedAt = Date()
        let config = CoalesceConfiguration(
            timers: self.timers,
            windowNanoseconds: OptionConversion.nanoseconds(self.window, nanosecondsPerUnit: 1e6),
            leewayNanoseconds: OptionConversion.nanoseconds(self.leeway, nanosecondsPerUnit: 1e6),
            seed: self.seed
        )
        let subjects: [any CoalesceSubject] = [
            EngineCoalesceSubject(engine: try TimerEngine()), DispatchSubject(), EventLoopSubject(),
        ]
        if let hgrm = self.hgrm { HistogramFiles.prepare(directory: hgrm, names: subjects.map(\.name), for: Self.self) }
        let results = try CoalesceRunner.run(
            subjects: subjects,
            config: config,
            load: self.load,
            hgrmDirectory: self.hgrm,
            progress: Terminal.progress(quiet: self.json)
        )
        let notes = CoalesceRunner.notes(config: config, load: self.load, results: results)
        let report = Report(
            command: "coalesce", invocation: .finished(startedAt: startedAt),
            config: RunSettings(
                measurement: config, command: CoalesceSettings(load: self.load, backends: subjects.map(\.name))),
            machine: .current(), results: results, notes: notes)
        try Terminal.show(
            report, json: self.json,
            settings: "\(self.timers) timers over \(self.window) ms, leeway \(self.leeway) ms, load \(self.load)",
            tables: [ResultTable.coalesce(results)])
    }
}
