import Foundation

/// Runs jitter subjects in interleaved rounds with the same settings and measures each.
///
/// ```swift
/// let config = JitterConfiguration(intervalNanoseconds: 1_000_000, samples: 10_000)
/// let results = try JitterRunner.run(subjects: [TimerfdLoopSubject(), DispatchSubject()],
///                                    config: config, rounds: 5)
/// print(ResultTable.jitter(results))
/// ```
///
/// Why rounds: a shared machine's wake-up latency drifts over minutes, so backends run one
/// after another would be judged in different weather. Each round gives every subject a
/// share of the samples, starting with a different subject each time, and each subject's
/// rounds are merged into one distribution.
public enum JitterRunner {
    /// Measures every subject, interleaved.
    ///
    /// In each round, for each subject: start `load` busy threads, take CPU time (load
    /// excluded) and voluntary wake-ups, run the subject with a fresh ``LatencyRecorder``
    /// (its share of `config.samples`, after `config.warmup` discarded firings), take them
    /// again, stop the load. Wake-ups per second are the subject's own count where it has
    /// one, otherwise the voluntary context switches.
    ///
    /// - Parameters:
    ///   - subjects: The backends; round `r` starts with subject `r` (mod count).
    ///   - config: Settings shared by every subject.
    ///   - load: Busy threads spinning during each run; 0 for none.
    ///   - rounds: How many turns the samples are split into; at least 1.
    ///   - hgrmDirectory: If set, `<directory>/<backend>.hgrm` is written for each subject;
    ///     the directory is created if needed.
    ///   - breakAboveNanoseconds: If set, the whole run stops at the first recorded firing
    ///   later than this (cyclictest's `--breaktrace`); the late subject's result says when.
    ///   - progress: Called with one line before and after each run, for a terminal.
    /// - Returns: One result per subject, in the order given.
    /// - Throws: ``MeasurementError`` for a bad configuration or a subject that fails; the
    ///   error of writing a `.hgrm` file.
    public static func run(
        subjects: [any JitterSubject],
        config: JitterConfiguration,
        load: Int = 0,
        rounds: Int = 1,
        hgrmDirectory: String? = nil,
        breakAboveNanoseconds: Int64? = nil,
        progress: ((String) -> Void)? = nil
    ) throws -> [JitterResult] {
        try config.validate()
        guard rounds >= 1, rounds <= config.samples else {
            throw MeasurementError.invalidConfiguration("rounds must be between 1 and the sample count")
        }
        try RunCost.prepare(load: load, hgrmDirectory: hgrmDirectory)
        var totals = subjects.map { _ in SubjectTotal(recorder: LatencyRecorder(target: config.samples)) }
        var breakNote: (subject: Int, text: String)?
        rounds: for round in 0..<rounds {
            var share = config
            share.samples = config.samples / rounds + (round < config.samples % rounds ? 1 : 0)
            for offset in subjects.indices {
                let index = (round + offset) % subjects.count
                let subject = subjects[index]
                progress?(
                    "round \(round + 1)/\(rounds), \(subject.name): \(share.samples) samples from "
                        + "\(config.timers) timer(s) every \(NumberText.microseconds(Double(config.intervalNanoseconds) / 1_000)) µs"
                )
                let recorder = LatencyRecorder(
                    target: share.samples, discardFirst: config.warmup, breakAboveNanoseconds: breakAboveNanoseconds)
                let (counters, cost) = try RunCost.measure(load: load) {
                    try subject.run(share, recorder: recorder)
                }
                totals[index].add(recorder, counters: counters, cost: cost)
                if let firstBreak = recorder.firstBreak {
                    breakNote = (index, BreakText.describe(firstBreak, backend: subject.name, round: round + 1))
                    break rounds
                }
            }
        }
        return try zip(subjects.indices, zip(subjects, totals)).map { index, pair in
            let (subject, total) = pair
            if let hgrmDirectory {
                try total.recorder.writePercentileDistribution(to: "\(hgrmDirectory)/\(subject.name).hgrm")
            }
            let summary = total.recorder.summary
            progress?(
                "\(subject.name): p50 \(NumberText.microseconds(summary.p50Microseconds)) µs, "
                    + "p99 \(NumberText.microseconds(summary.p99Microseconds)) µs, "
                    + "max \(NumberText.microseconds(summary.maxMicroseconds)) µs"
            )
            return JitterResult(
                backend: subject.name,
                latency: summary,
                wakeupsPerSecond: total.cost.perSecond(total.counters.wakeups ?? total.cost.voluntaryWakeups),
                cpuMillisecondsPer1k: total.cost.cpuMillisecondsPer1k(firings: total.recorder.firings),
                note: [
                    RunNotes.resultNote(backend: subject.name, counters: total.counters),
                    breakNote?.subject == index ? breakNote?.text : nil,
                ]
                .compactMap { $0 }.joined(separator: "; ").nilIfEmpty,
                rounds: total.rounds,
                threads: total.counters.threads
            )
        }
    }

    /// One subject's rounds, added up.
    private struct SubjectTotal {
        let recorder: LatencyRecorder
        var counters = SubjectCounters(wakeups: 0)
        var cost = RunCost(elapsedNanoseconds: 0, cpuNanoseconds: 0, voluntaryWakeups: 0)
        var rounds: [JitterRound] = []

        mutating func add(_ round: LatencyRecorder, counters: SubjectCounters, cost: RunCost) {
            self.rounds.append(JitterRound(round.summary))
            self.recorder.merge(round)
            self.cost = self.cost + cost
            // A count is only meaningful if every round had one.
            self.counters.wakeups = self.counters.wakeups.flatMap { total in counters.wakeups.map { total + $0 } }
            self.counters.note = counters.note
            self.counters.threads = JitterThreadResult.adding(self.counters.threads, counters.threads)
        }
    }

    /// The notes a jitter report should carry: how the run was made, and each result's note.
    ///
    /// - Parameters:
    ///   - config: The settings the results were measured with.
    ///   - load: The busy threads that ran.
    ///   - results: The results, for their backends and notes.
    public static func notes(config: JitterConfiguration, load: Int, rounds: Int = 1, results: [JitterResult])
        -> [String]
    {
        var notes = RunNotes.common(backends: results.map(\.backend), load: load, rounds: rounds)
        notes.append("lateness = firing time − deadline on \(config.clock.cName), measured at handler entry")
        if config.timers > 1 {
            notes.append("\(config.timers) timers are spread evenly over one interval")
        }
        notes.append(contentsOf: results.compactMap(\.note))
        return notes
    }
}
