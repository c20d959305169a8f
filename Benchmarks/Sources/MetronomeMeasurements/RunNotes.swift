/// Sentences that explain how results were measured, shared by the runners.
enum RunNotes {
    /// How every run was made: in sequence (or in rotated rounds), with the same settings,
    /// under the same load.
    static func common(backends: [String], load: Int, rounds: Int = 1) -> [String] {
        let list = backends.joined(separator: ", ")
        var notes = [
            rounds > 1
                ? "backends ran interleaved with the same settings: \(rounds) rounds, each starting with the next backend of \(list)"
                : "backends ran one after another with the same settings: \(list)"
        ]
        if load > 0 {
            notes.append("\(load) busy thread(s) spun during each run; their CPU time is excluded from cpu_ms_per_1k")
        }
        return notes
    }

    /// The subject's own note, plus where its wake-up count came from when it had none.
    static func resultNote(backend: String, counters: SubjectCounters) -> String? {
        var parts = counters.note.map { [$0] } ?? []
        if counters.wakeups == nil {
            parts.append(
                "\(backend): wake-ups are the process's voluntary context switches (getrusage ru_nvcsw), "
                    + "an upper bound on its timer wake-ups"
            )
        }
        return parts.isEmpty ? nil : parts.joined(separator: "; ")
    }
}
