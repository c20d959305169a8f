import ArgumentParser
import Metronome
import MetronomeMeasurements

/// `metronome coalesce`: how many wake-ups N one-shot timers with leeway cost, against the
/// offline optimum.
struct CoalesceCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "coalesce",
        abstract: "Wake-ups of one-shot timers with leeway, engine versus GCD, against the optimum."
    )

    @Option(help: "One-shot timers per backend.")
    var timers: Int = 10_000

    @Option(help: "Window the deadlines are spread over, in milliseconds.")
    var window: Double = 2000

    @Option(help: "Leeway of every timer, in milliseconds.")
    var leeway: Double = 50

    @Option(help: "Seed of the deadlines (the same for every backend).")
    var seed: UInt64 = 1

    @Option(help: "Busy threads started for the run.")
    var load: Int = 0

    @Flag(help: "Print JSON instead of a table.")
    var json = false

    func run() throws {
        let config = CoalesceConfiguration(
            timers: self.timers,
            windowNanoseconds: Int64(self.window * 1e6),
            leewayNanoseconds: Int64(self.leeway * 1e6),
            seed: self.seed
        )
        let subjects: [any CoalesceSubject] = [EngineCoalesceSubject(engine: try TimerEngine()), DispatchSubject()]
        let results = try CoalesceRunner.run(
            subjects: subjects,
            config: config,
            load: self.load,
            progress: Terminal.progress(quiet: self.json)
        )
        let notes = CoalesceRunner.notes(config: config, load: self.load, results: results)
        let report = Report(command: "coalesce", config: config, machine: .current(), results: results, notes: notes)
        if self.json {
            print(try report.jsonString())
        } else {
            Terminal.printHeader(report.machine, config: "\(self.timers) timers over \(self.window) ms, leeway \(self.leeway) ms, load \(self.load)")
            print(ResultTable.coalesce(results))
            notes.forEach { print("note: \($0)") }
        }
    }
}
