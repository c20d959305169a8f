/// One backend measured from several threads at once, each with timers of its own and,
/// where the backend can be pinned, on a CPU of its own: cyclictest's `-t`, `-a` and `--smp`.
///
/// Every thread runs its own subject (an engine per thread, a timerfd thread per timer, …)
/// into its own recorder, with the round's target and warm-up, as each cyclictest thread
/// runs the full loop count. The threads' samples then merge into the backend's one
/// distribution, and each thread's worst case is kept beside it.
///
/// ```swift
/// let subject = JitterThreads(name: "timerfd", cpus: [0, 1]) { TimerfdLoopSubject(cpu: $0) }
/// let results = try JitterRunner.run(subjects: [subject], config: config)
/// print(results[0].threads!.map(\.maxMicroseconds))
/// ```
public struct JitterThreads: JitterSubject {
    /// The backend's name.
    public let name: String
    /// Each thread's CPU (`nil`: not pinned) and subject.
    private let threads: [(cpu: Int?, subject: any JitterSubject)]

    /// Makes one subject per measuring thread.
    ///
    /// - Parameters:
    ///   - name: The backend's name in results.
    ///   - cpus: One entry per thread: the CPU its subject pins itself to, or `nil`.
    ///   - subject: Makes thread `i`'s subject, pinned to `cpus[i]`.
    public init(name: String, cpus: [Int?], subject: (Int?) throws -> any JitterSubject) rethrows {
        self.name = name
        self.threads = try cpus.map { ($0, try subject($0)) }
    }

    /// Runs every thread's subject at once, each on a thread that waits for it, then merges
    /// their samples into `recorder`.
    ///
    /// - Returns: Wake-ups added over the threads (`nil` if one could not count them), the
    ///   subjects' distinct notes, and a ``JitterThreadResult`` per thread.
    /// - Throws: The first thread's error, once every thread has finished.
    public func run(_ config: JitterConfiguration, recorder: LatencyRecorder) throws -> SubjectCounters {
        let recorders = self.threads.map { _ in recorder.sibling() }
        let outcomes = LockedCondition<[Result<SubjectCounters, any Error>?]>(self.threads.map { _ in nil })
        var waiters: [PosixThread] = []
        // Joined even when a later spawn fails: a started subject ends on its own timeout.
        defer { waiters.forEach { $0.join() } }
        for (index, thread) in self.threads.enumerated() {
            let subject = thread.subject
            let threadRecorder = recorders[index]
            waiters.append(
                try PosixThread.spawn {
                    let outcome = Result { try subject.run(config, recorder: threadRecorder) }
                    outcomes.withLock { $0[index] = outcome }
                    // A break stops the whole run, as in cyclictest, not this thread only.
                    if threadRecorder.firstBreak != nil { recorders.forEach { $0.stop() } }
                })
        }
        waiters.forEach { $0.join() }
        waiters = []
        var counters = SubjectCounters(wakeups: 0, threads: [])
        var notes: [String] = []
        for (index, outcome) in outcomes.withLock({ $0 }).enumerated() {
            let threadCounters = try outcome!.get()
            counters.wakeups = counters.wakeups.flatMap { total in threadCounters.wakeups.map { total + $0 } }
            if let note = threadCounters.note, !notes.contains(note) { notes.append(note) }
            recorder.merge(recorders[index])
            counters.threads?.append(
                JitterThreadResult(thread: index, cpu: self.threads[index].cpu, recorder: recorders[index]))
        }
        counters.note = notes.isEmpty ? nil : notes.joined(separator: "; ")
        return counters
    }
}
