import ArgumentParser
import Foundation
import Metronome
import MetronomeMeasurements

/// `metronome jitter`: how late a repeating timer's handler runs, per backend.
struct JitterCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "jitter",
        abstract: "Handler lateness of repeating timers: engine, engine-rt, engine-spin, gcd, timerfd."
    )

    @Option(help: "Timer period in microseconds.")
    var interval: Double = 1000

    @Option(help: "Samples per backend (after a warm-up of 100).")
    var samples: Int = 5000

    @Option(help: "Run each backend for this many seconds instead of a sample count.")
    var duration: Double?

    @Option(help: "Concurrent timers per backend, phases spread over one period.")
    var timers: Int = 1

    @Option(help: "Leeway in microseconds.")
    var leeway: Double = 0

    @Option(help: "Rounds the samples are split into, backends interleaved in rotated order.")
    var rounds: Int = 5

    @Option(help: "Busy threads started for the run, to measure under load.")
    var load: Int = 0

    @Option(name: .customLong("handler-work"), help: "Microseconds each handler spins, to simulate work.")
    var handlerWork: Double = 0

    @Option(help: "Spin window of engine-spin, in microseconds.")
    var spin: Double = 50

    @Option(help: "SCHED_FIFO priority of engine-rt.")
    var priority: Int = 50

    @Option(help: "Backends to run, comma-separated (also: gcd-safe, sleep-engine, sleep-continuous).")
    var backends: String = "engine,engine-rt,engine-spin,gcd,timerfd"

    @Option(help: "Write an HdrHistogram percentile file per backend into this directory.")
    var hgrm: String?

    @Flag(help: "Print JSON instead of a table.")
    var json = false

    func run() throws {
        let intervalNanoseconds = Int64(self.interval * 1000)
        let samples = self.duration.map { Int($0 * 1e9) / Int(max(intervalNanoseconds, 1)) * self.timers } ?? self.samples
        let config = JitterConfiguration(
            intervalNanoseconds: intervalNanoseconds,
            samples: samples,
            timers: self.timers,
            leewayNanoseconds: Int64(self.leeway * 1000),
            handlerWorkNanoseconds: Int64(self.handlerWork * 1000)
        )
        let (subjects, notes) = try self.subjects()
        let results = try JitterRunner.run(
            subjects: subjects,
            config: config,
            load: self.load,
            rounds: self.rounds,
            hgrmDirectory: self.hgrm,
            progress: Terminal.progress(quiet: self.json)
        )
        let allNotes = notes + JitterRunner.notes(config: config, load: self.load, rounds: self.rounds, results: results)
        let report = Report(command: "jitter", config: config, machine: .current(), results: results, notes: allNotes)
        if self.json {
            print(try report.jsonString())
        } else {
            Terminal.printHeader(report.machine, config: "interval \(self.interval) µs, \(samples) samples, \(self.timers) timer(s), leeway \(self.leeway) µs, load \(self.load), \(self.rounds) rounds")
            print(ResultTable.jitter(results))
            allNotes.forEach { print("note: \($0)") }
        }
    }

    /// The requested backends; engine-rt is left out, with a note, where SCHED_FIFO is refused.
    private func subjects() throws -> ([any JitterSubject], [String]) {
        var subjects: [any JitterSubject] = []
        var notes: [String] = []
        for name in self.backends.split(separator: ",").map(String.init) {
            switch name {
            case "engine":
                let engine = try TimerEngine()
                subjects.append(SafeTimerJitterSubject(name: name, backend: .engine(engine), engine: engine))
            case "engine-rt":
                let engine = try TimerEngine(configuration: .init(realtimePriority: self.priority))
                if let refusal = engine.threadReport.realtimeRefusal {
                    notes.append("engine-rt skipped: SCHED_FIFO refused (\(refusal))")
                } else {
                    subjects.append(SafeTimerJitterSubject(name: name, backend: .engine(engine), engine: engine))
                }
            case "engine-spin":
                let engine = try TimerEngine(configuration: .init(spinWindow: .nanoseconds(Int64(self.spin * 1000))))
                subjects.append(SafeTimerJitterSubject(name: name, backend: .engine(engine), engine: engine))
            case "gcd":
                subjects.append(DispatchSubject())
            case "gcd-safe":
                subjects.append(SafeTimerJitterSubject(name: name, backend: .dispatch, engine: nil))
            case "timerfd":
                subjects.append(TimerfdLoopSubject())
            case "sleep-engine":
                subjects.append(SleepJitterSubject(engine: try TimerEngine()))
            case "sleep-continuous":
                subjects.append(SleepJitterSubject())
            default:
                throw ValidationError(
                    "unknown backend '\(name)': use engine, engine-rt, engine-spin, gcd, gcd-safe, timerfd, "
                        + "sleep-engine, sleep-continuous")
            }
        }
        return (subjects, notes)
    }
}
