import Foundation

/// Runs jitter subjects one after another with the same settings and measures each.
///
/// ```swift
/// let config = JitterConfiguration(intervalNanoseconds: 1_000_000, samples: 10_000)
/// let results = try JitterRunner.run(subjects: [TimerfdLoopSubject(), DispatchSubject()],
///                                    config: config, load: 0, hgrmDirectory: nil, progress: nil)
/// print(ResultTable.jitter(results))
/// ```
public enum JitterRunner {
    /// Measures each subject in turn.
    ///
    /// For each subject: start `load` busy threads, take CPU time (load excluded) and voluntary
    /// wake-ups, run the subject with a fresh ``LatencyRecorder`` (`target` = `config.samples`,
    /// `discardFirst` = `config.warmup`), take them again, stop the load. Wake-ups per second
    /// are the subject's own count where it has one, otherwise the voluntary context switches.
    ///
    /// - Parameters:
    ///   - subjects: The backends, run in this order.
    ///   - config: Settings shared by every subject.
    ///   - load: Busy threads spinning during each run; 0 for none.
    ///   - hgrmDirectory: If set, `<directory>/<backend>.hgrm` is written for each subject;
    ///     the directory is created if needed.
    ///   - progress: Called with one line before and after each subject, for a terminal.
    /// - Returns: One result per subject, in order.
    /// - Throws: ``MeasurementError`` for a bad configuration or a subject that fails; the
    ///   error of writing a `.hgrm` file.
    public static func run(
        subjects: [any JitterSubject],
        config: JitterConfiguration,
        load: Int = 0,
        hgrmDirectory: String? = nil,
        progress: ((String) -> Void)? = nil
    ) throws -> [JitterResult] {
        try config.validate()
        try RunCost.prepare(load: load, hgrmDirectory: hgrmDirectory)
        return try subjects.map { subject in
            progress?(
                "\(subject.name): \(config.samples) samples from \(config.timers) timer(s) every "
                    + "\(NumberText.microseconds(Double(config.intervalNanoseconds) / 1_000)) µs"
            )
            let recorder = LatencyRecorder(target: config.samples, discardFirst: config.warmup)
            let (counters, cost) = try RunCost.measure(load: load) {
                try subject.run(config, recorder: recorder)
            }
            if let hgrmDirectory {
                try recorder.writePercentileDistribution(to: "\(hgrmDirectory)/\(subject.name).hgrm")
            }
            let summary = recorder.summary
            progress?(
                "\(subject.name): p50 \(NumberText.microseconds(summary.p50Microseconds)) µs, "
                    + "p99 \(NumberText.microseconds(summary.p99Microseconds)) µs, "
                    + "max \(NumberText.microseconds(summary.maxMicroseconds)) µs"
            )
            return JitterResult(
                backend: subject.name,
                latency: summary,
                wakeupsPerSecond: cost.perSecond(counters.wakeups ?? cost.voluntaryWakeups),
                cpuMillisecondsPer1k: cost.cpuMillisecondsPer1k(firings: recorder.firings),
                note: RunNotes.resultNote(backend: subject.name, counters: counters)
            )
        }
    }

    /// The notes a jitter report should carry: how the run was made, and each result's note.
    ///
    /// - Parameters:
    ///   - config: The settings the results were measured with.
    ///   - load: The busy threads that ran.
    ///   - results: The results, for their backends and notes.
    public static func notes(config: JitterConfiguration, load: Int, results: [JitterResult]) -> [String] {
        var notes = RunNotes.common(backends: results.map(\.backend), load: load)
        notes.append("lateness = firing time − deadline on CLOCK_MONOTONIC, measured at handler entry")
        if config.timers > 1 {
            notes.append("\(config.timers) timers are spread evenly over one interval")
        }
        notes.append(contentsOf: results.compactMap(\.note))
        return notes
    }
}
