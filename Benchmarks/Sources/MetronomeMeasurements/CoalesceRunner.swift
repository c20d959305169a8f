import Foundation

/// Runs coalesce subjects one after another with the same settings and measures each.
///
/// ```swift
/// let results = try CoalesceRunner.run(subjects: [DispatchSubject()], config: CoalesceConfiguration())
/// print(ResultTable.coalesce(results))
/// ```
public enum CoalesceRunner {
    /// Measures each subject in turn.
    ///
    /// Each subject gets deadlines from ``CoalesceConfiguration/deadlines(now:)`` taken just
    /// before its run: the same offsets for every subject, since the seed is the same. Costs
    /// are measured as in ``JitterRunner/run(subjects:config:load:hgrmDirectory:progress:)``,
    /// and the optimum is ``CoalesceConfiguration/optimumWakeups(for:)``.
    ///
    /// - Parameters:
    ///   - subjects: The backends, run in this order.
    ///   - config: Settings shared by every subject.
    ///   - load: Busy threads spinning during each run; 0 for none.
    ///   - hgrmDirectory: If set, `<directory>/<backend>.hgrm` is written for each subject.
    ///   - progress: Called with one line before and after each subject, for a terminal.
    /// - Returns: One result per subject, in order.
    /// - Throws: ``MeasurementError`` for a bad configuration or a subject that fails; the
    ///   error of writing a `.hgrm` file.
    public static func run(
        subjects: [any CoalesceSubject],
        config: CoalesceConfiguration,
        load: Int = 0,
        hgrmDirectory: String? = nil,
        progress: ((String) -> Void)? = nil
    ) throws -> [CoalesceResult] {
        try config.validate()
        try RunCost.prepare(load: load, hgrmDirectory: hgrmDirectory)
        return try subjects.map { subject in
            progress?(
                "\(subject.name): \(config.timers) one-shot timers, leeway "
                    + "\(NumberText.fixed(Double(config.leewayNanoseconds) / 1e6, places: 1)) ms"
            )
            let recorder = CoalesceRecorder(timers: config.timers, leewayNanoseconds: config.leewayNanoseconds)
            // Deadlines are placed once the load is running, so starting it eats none of the lead.
            let ((counters, deadlines), cost) = try RunCost.measure(load: load) {
                let deadlines = config.deadlines()
                return (try subject.run(config, deadlines: deadlines, recorder: recorder), deadlines)
            }
            if let hgrmDirectory {
                try recorder.writePercentileDistribution(to: "\(hgrmDirectory)/\(subject.name).hgrm")
            }
            let wakeups = counters.wakeups ?? cost.voluntaryWakeups
            let optimum = config.optimumWakeups(for: deadlines)
            progress?("\(subject.name): \(wakeups) wake-ups (optimum \(optimum)), \(recorder.late) late")
            return CoalesceResult(
                backend: subject.name,
                latency: recorder.summary,
                inWindow: recorder.inWindow,
                late: recorder.late,
                wakeups: wakeups,
                optimumWakeups: optimum,
                wakeupsPerSecond: cost.perSecond(wakeups),
                cpuMillisecondsPer1k: cost.cpuMillisecondsPer1k(firings: recorder.firings),
                note: RunNotes.resultNote(backend: subject.name, counters: counters)
            )
        }
    }

    /// The notes a coalesce report should carry: how the run was made, and each result's note.
    public static func notes(config: CoalesceConfiguration, load: Int, results: [CoalesceResult]) -> [String] {
        var notes = RunNotes.common(backends: results.map(\.backend), load: load)
        notes.append(
            "deadlines uniform at random (SplitMix64, seed \(config.seed)) over the window; "
                + "optimum_wakeups = minimum points stabbing every [deadline, deadline + leeway]"
        )
        notes.append(contentsOf: results.compactMap(\.latency.note))
        return notes
    }
}
