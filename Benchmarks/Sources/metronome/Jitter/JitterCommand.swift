import ArgumentParser
import Foundation
import Metronome
import MetronomeMeasurements

/// `metronome jitter`: how late a repeating timer's handler runs, per backend.
struct JitterCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "jitter",
        abstract: "Handler lateness of repeating timers: engine, engine-rt, engine-spin, gcd, nio, timerfd."
    )

    /// Backends whose deadlines only `DispatchTime`, `NIODeadline` or `ContinuousClock` can express.
    static let monotonicOnlyBackends: Set = ["gcd", "gcd-safe", "nio", "sleep-engine", "sleep-continuous"]

    static let knownBackends = [
        "engine", "engine-rt", "engine-spin", "gcd", "gcd-safe", "nio", "timerfd", "sleep-engine", "sleep-continuous",
    ]

    /// What pinning a measuring thread means for the backends where it is not the whole story,
    /// and whether they are pinned at all.
    ///
    /// Backends that cannot be pinned still run one measuring thread each, unpinned, with a
    /// note, rather than refusing `--affinity` and `--smp`: the default backends include gcd,
    /// and its row under the same thread count is the comparison the others are read against.
    static let pinningCaveats: [String: (pinned: Bool, note: String)] = [
        "gcd": (false, dispatchThreads),
        "gcd-safe": (false, dispatchThreads),
        "nio": (false, "MultiThreadedEventLoopGroup starts its loop's thread itself, which is not pinned"),
        "sleep-continuous": (
            true,
            "each task resumes on a thread pinned to its CPU, woken from libdispatch's threads, which cannot be pinned"
        ),
    ]

    private static let dispatchThreads =
        "libdispatch runs handlers on threads of its own choosing, which cannot be pinned"

    /// Measuring threads allowed per online CPU: more only queue behind each other, which
    /// measures the scheduler rather than the timers.
    static let threadsPerCPU = 8

    @Option(help: "Timer period in microseconds, 0.001 (1 ns) to 10000000 (10 s).")
    var interval: Double = 1000

    @Option(help: "Samples per backend and measuring thread (after a warm-up of 100), 1 to 10000000.")
    var samples: Int = 5000

    @Option(
        name: [.customShort("D"), .long],
        help: "Run each backend this long instead of a sample count: 90, 500ms, 1m, 2h (at most 1d).")
    var duration: TimeSpan?

    @Option(help: "Concurrent timers per backend and measuring thread, phases spread over one period, 1 to 100000.")
    var timers: Int = 1

    @Option(
        name: [.customShort("t"), .long],
        help: "Measuring threads per backend, each with its own timers (as cyclictest's -t): 1 to 8 per online CPU.")
    var threads: Int?

    @Option(
        name: [.customShort("a"), .long],
        help: ArgumentHelp(
            "Pin measuring thread i to the i-th CPU of this list, e.g. 0,2-3 (as cyclictest's -a); "
                + "without --threads, a thread per CPU listed.",
            valueName: "cpu-list"))
    var affinity: CPUList?

    @Flag(
        help:
            "A measuring thread per CPU this process may use, each pinned to its CPU (as cyclictest's --smp; sets --threads and --affinity)."
    )
    var smp = false

    @Option(help: "Leeway in microseconds, 0 to 10000000.")
    var leeway: Double = 0

    @Option(help: "Rounds the samples are split into, backends interleaved in rotated order, 1 to 1000.")
    var rounds: Int = 5

    @Option(help: "Busy threads started for the run, to measure under load; at most 8 per CPU.")
    var load: Int = 0

    @Option(
        name: .customLong("handler-work"),
        help: "Microseconds each handler spins, to simulate work; 0 up to the period.")
    var handlerWork: Double = 0

    @Option(help: "Spin window of engine-spin, in microseconds, 0 to 1000 (the engine's most).")
    var spin: Double = 50

    @Option(
        help:
            "Clock of every deadline and firing: monotonic, boottime or wall (backends on CLOCK_MONOTONIC only are skipped)."
    )
    var clock: MeasurementClock = .monotonic

    @Option(help: "Scheduling policy of engine-rt's firing thread and of cyclictest's: fifo, rr or other.")
    var policy: SchedulingPolicy = .fifo

    @Option(help: "Priority of engine-rt and cyclictest under --policy: 1 to 99 for fifo and rr (ignored for other).")
    var priority: Int = 50

    /// The priority the policy runs at: cyclictest's rule, 0 for `other` whatever was given.
    private var effectivePriority: Int { self.policy == .other ? 0 : self.priority }

    @Option(help: "Backends to run, comma-separated (also: gcd-safe, sleep-engine, sleep-continuous).")
    var backends: String = "engine,engine-rt,engine-spin,gcd,nio,timerfd"

    @Option(help: "Write an HdrHistogram percentile file per backend into this directory.")
    var hgrm: String?

    @Option(
        help:
            "Stop the whole run at the first firing later than this many µs, and say when (as cyclictest's --breaktrace)."
    )
    var breaktrace: Double?

    @Flag(
        name: .customLong("with-cyclictest"),
        help: "Also run cyclictest (rt-tests) with the same period and samples at --priority, as a row of its own.")
    var withCyclictest = false

    @Flag(help: "Lock the process's memory (mlockall), as cyclictest's --mlockall.")
    var mlockall = false

    @Flag(
        inversion: .prefixedNo,
        help: "Hold /dev/cpu_dma_latency at 0 while measuring, as cyclictest does (reported when refused).")
    var dmaLatency = true

    @Flag(
        name: [.customShort("N"), .long],
        help: "Print the table's latencies in nanoseconds (as cyclictest's -N); the JSON keeps µs.")
    var nsecs = false

    @Flag(help: "Print JSON instead of a table.")
    var json = false

    func validate() throws {
        try OptionRules.check(self.interval, "--interval", in: 0.001...10_000_000, unit: "µs")
        try OptionRules.check(self.samples, "--samples", in: 1...10_000_000)
        try OptionRules.check(self.timers, "--timers", in: 1...Self.mostTimers)
        try self.validateThreads()
        if let duration = self.duration {
            try OptionRules.check(
                duration.seconds, "--duration", above: 0, upTo: OptionRules.longestRunSeconds, unit: "s")
        }
        try OptionRules.check(self.leeway, "--leeway", in: 0...10_000_000, unit: "µs")
        try OptionRules.check(self.rounds, "--rounds", in: 1...1000)
        try OptionRules.checkLoad(self.load)
        try OptionRules.check(self.handlerWork, "--handler-work", in: 0...self.interval, unit: "µs")
        try OptionRules.check(self.spin, "--spin", in: 0...Self.mostSpinMicroseconds, unit: "µs")
        try OptionRules.check(self.priority, "--priority", in: self.policy == .other ? 0...99 : 1...99)
        if let breaktrace = self.breaktrace {
            try OptionRules.check(breaktrace, "--breaktrace", in: 0.001...10_000_000, unit: "µs")
        }
        let names = try OptionRules.names(self.backends, "--backends", known: Self.knownBackends)
        if let hgrm = self.hgrm, hgrm.isEmpty { throw ValidationError("--hgrm needs a directory") }
        let cyclictestRuns = self.withCyclictest && self.clock != .boottime
        if self.clock != .monotonic, !cyclictestRuns, names.allSatisfy(Self.monotonicOnlyBackends.contains) {
            throw ValidationError(
                "--clock \(self.clock.rawValue) leaves nothing to measure: \(names.joined(separator: ", ")) measure on CLOCK_MONOTONIC only"
            )
        }
        // The run length follows from the counts: refuse one that cannot finish in a day.
        let samples = self.sampleCount
        try OptionRules.check(samples, "--samples (from --duration)", in: 1...10_000_000)
        guard self.rounds <= samples else {
            throw ValidationError("--rounds must not exceed the sample count (\(samples))")
        }
        let seconds = Double(samples) / Double(self.timers) * self.interval / 1e6 * Double(names.count)
        guard seconds <= OptionRules.longestRunSeconds else {
            throw ValidationError(
                "--samples, --timers and --interval ask for \(Int(seconds)) s over \(names.count) backend(s); at most 86400"
            )
        }
    }

    /// `--threads`, `--affinity` and `--smp`: a thread count the machine can run, CPUs this
    /// process may use, none twice, one for every thread.
    private func validateThreads() throws {
        if self.smp, self.threads != nil || self.affinity != nil {
            throw ValidationError("--smp sets --threads and --affinity itself: give --smp or those two")
        }
        let most = Self.threadsPerCPU * OptionRules.cpuCount
        if let threads = self.threads {
            guard (1...most).contains(threads) else {
                throw ValidationError(
                    "--threads must be between 1 and \(most) (\(Self.threadsPerCPU) per online CPU) (got \(threads))")
            }
        }
        guard self.smp || self.affinity != nil else {
            return try self.checkTimerTotal(threads: self.threads ?? 1, from: "--threads")
        }
        let option = self.smp ? "--smp" : "--affinity"
        guard let allowed = CPUList.allowed, !allowed.cpus.isEmpty else {
            throw ValidationError("\(option): cannot read the CPUs this process may use from /proc/self/status")
        }
        guard let affinity = self.affinity else {
            return try self.checkTimerTotal(threads: allowed.cpus.count, from: "--smp")
        }
        for cpu in affinity.cpus where !allowed.cpus.contains(cpu) {
            throw ValidationError(
                "--affinity: CPU \(cpu) is not online or not allowed to this process; use CPUs in \(allowed)")
        }
        guard Set(affinity.cpus).count == affinity.cpus.count else {
            throw ValidationError("--affinity must not name a CPU twice (got \(affinity))")
        }
        if let threads = self.threads, affinity.cpus.count < threads {
            throw ValidationError(
                "--affinity lists \(affinity.cpus.count) CPU(s) for \(threads) --threads; it needs one per thread")
        }
        try self.checkTimerTotal(
            threads: self.threads ?? affinity.cpus.count, from: self.threads == nil ? "--affinity" : "--threads")
    }

    /// Every measuring thread arms `--timers` of its own, however the thread count was
    /// given: `--threads`, one per `--affinity` CPU, or one per CPU with `--smp`.
    private func checkTimerTotal(threads: Int, from option: String) throws {
        guard threads * self.timers <= Self.mostTimers else {
            throw ValidationError(
                "\(option) runs \(threads) thread(s) of --timers \(self.timers) each: at most \(Self.mostTimers) timers in all"
            )
        }
    }

    /// Timers over every measuring thread: the timerfd backend takes a descriptor for each.
    static let mostTimers = 100_000

    /// The engine refuses a longer spin window.
    static let mostSpinMicroseconds = TimerEngine.Configuration.maximumSpinWindow / .microseconds(1)

    /// Each measuring thread's CPU (`nil`: not pinned), or `nil` when no thread option was
    /// given and every backend is measured as a whole, as before these options existed.
    private var measuringCPUs: [Int?]? {
        if self.smp { return CPUList.allowed?.cpus }
        if let affinity = self.affinity { return Array(affinity.cpus.prefix(self.threads ?? affinity.cpus.count)) }
        return self.threads.map { Array(repeating: nil, count: $0) }
    }

    /// The CPUs of `measuringCPUs` in thread order, or `nil` when the threads are not pinned.
    private static func pinned(_ measuringCPUs: [Int?]?) -> [Int]? {
        let cpus = measuringCPUs?.compactMap { $0 } ?? []
        return cpus.isEmpty ? nil : cpus
    }

    /// Samples per backend: `--samples`, or as many as `--duration` holds.
    private var sampleCount: Int {
        guard let duration = self.duration else { return self.samples }
        let perTimer = duration.seconds * 1e6 / self.interval
        // Above the cap, whatever the exact count: validate() then refuses it.
        guard perTimer * Double(self.timers) < 1e12 else { return Int.max }
        return Int(perTimer) * self.timers
    }

    func run() throws {
        let startedAt = Date()
        let samples = self.sampleCount
        let config = JitterConfiguration(
            intervalNanoseconds: OptionConversion.nanoseconds(self.interval, nanosecondsPerUnit: 1_000),
            samples: samples,
            timers: self.timers,
            leewayNanoseconds: OptionConversion.nanoseconds(self.leeway, nanosecondsPerUnit: 1_000),
            handlerWorkNanoseconds: OptionConversion.nanoseconds(self.handlerWork, nanosecondsPerUnit: 1_000),
            clock: self.clock
        )
        let measuringCPUs = self.measuringCPUs
        let (subjects, notes) = try self.subjects(measuringCPUs: measuringCPUs)
        if let hgrm = self.hgrm { HistogramFiles.prepare(directory: hgrm, names: subjects.map(\.name), for: Self.self) }
        let controls = LatencyControls(lockMemory: self.mlockall, holdDMALatency: self.dmaLatency)
        defer { controls.release() }
        let results = try JitterRunner.run(
            subjects: subjects,
            config: config,
            load: self.load,
            rounds: self.rounds,
            hgrmDirectory: self.hgrm,
            breakAboveNanoseconds: self.breaktrace.map { OptionConversion.nanoseconds($0, nanosecondsPerUnit: 1_000) },
            progress: Terminal.progress(quiet: self.json)
        )
        let unit: LatencyUnit = self.nsecs ? .nanoseconds : .microseconds
        let roundsTable = JitterTableNotes.roundsTable(results, unit: unit)
        let allNotes =
            notes + controls.refusals
            + JitterRunner.notes(config: config, load: self.load, rounds: self.rounds, results: results)
            + results.compactMap { Self.threadNote($0, unit: unit) }
            + JitterTableNotes.resultColumns(unit: unit, comparedWithGCD: results.contains { $0.backend == "gcd" })
            + (roundsTable == nil ? [] : JitterTableNotes.roundsColumnNotes(unit: unit))
            + [JitterTableNotes.rankingNote(results)].compactMap { $0 }
        let settings = JitterSettings(
            load: self.load, rounds: self.rounds, backends: subjects.map(\.name),
            threads: measuringCPUs?.count ?? 1, affinity: Self.pinned(measuringCPUs), smp: self.smp,
            spinNanoseconds: OptionConversion.nanoseconds(self.spin, nanosecondsPerUnit: 1_000),
            policy: self.policy, priority: self.effectivePriority, hgrmDirectory: self.hgrm,
            memoryLocked: controls.memoryLocked,
            dmaLatencyHeld: controls.dmaLatencyHeld,
            breaktraceNanoseconds: self.breaktrace.map { OptionConversion.nanoseconds($0, nanosecondsPerUnit: 1_000) })
        let report = Report(
            command: "jitter", invocation: .finished(startedAt: startedAt),
            config: RunSettings(measurement: config, command: settings), machine: .current(),
            results: results, notes: allNotes)
        let threads = measuringCPUs.map { cpus in
            ", \(cpus.count) thread(s)" + (Self.pinned(cpus).map { " on CPUs \(CPUList($0))" } ?? "")
        }
        try Terminal.show(
            report, json: self.json,
            settings: "interval \(self.interval) µs, \(samples) samples, \(self.timers) timer(s)\(threads ?? ""), "
                + "leeway \(self.leeway) µs, load \(self.load), \(self.rounds) rounds",
            tables: [ResultTable.jitter(results, unit: unit)] + [roundsTable].compactMap { $0 })
    }

    /// Each thread's worst case, as cyclictest prints a `Max` per thread.
    private static func threadNote(_ result: JitterResult, unit: LatencyUnit) -> String? {
        guard let threads = result.threads else { return nil }
        let maxima = threads.map { thread in
            "T\(thread.thread)\(thread.cpu.map { " (CPU \($0))" } ?? "") \(unit.text(thread.maxMicroseconds)) \(unit.symbol)"
        }
        return "\(result.backend) max per thread: \(maxima.joined(separator: ", "))"
    }

    /// Why a backend was left out of the run.
    private struct Refusal: Error {
        var reason: String
    }

    /// The requested backends, each on `measuringCPUs` when a thread option was given;
    /// engine-rt is left out, with a note, where its policy is refused.
    private func subjects(measuringCPUs: [Int?]?) throws -> ([any JitterSubject], [String]) {
        var subjects: [any JitterSubject] = []
        var notes: [String] = []
        for name in try OptionRules.names(self.backends, "--backends", known: Self.knownBackends) {
            if self.clock != .monotonic, Self.monotonicOnlyBackends.contains(name) {
                notes.append("\(name) skipped: it measures on CLOCK_MONOTONIC only")
                continue
            }
            do {
                guard let cpus = measuringCPUs else {
                    subjects.append(try self.subject(name, cpu: nil))
                    continue
                }
                let caveat = Self.pinningCaveats[name]
                let pinned = caveat?.pinned ?? true
                subjects.append(
                    try JitterThreads(name: name, cpus: cpus.map { pinned ? $0 : nil }) {
                        try self.subject(name, cpu: $0)
                    })
                if let caveat, Self.pinned(cpus) != nil { notes.append("\(name): \(caveat.note)") }
            } catch let refusal as Refusal {
                notes.append("\(name) skipped: \(refusal.reason)")
            }
        }
        if self.withCyclictest {
            if self.clock == .boottime {
                notes.append("cyclictest skipped: it has no CLOCK_BOOTTIME")
            } else if let executable = CyclictestSubject.installed() {
                subjects.append(
                    CyclictestSubject(
                        executable: executable, policy: self.policy, priority: self.effectivePriority,
                        lockMemory: self.mlockall, clock: self.clock, cpus: measuringCPUs, smp: self.smp))
            } else {
                notes.append("cyclictest skipped: not installed (Debian: apt-get install rt-tests)")
            }
        }
        return (subjects, notes)
    }

    /// Backend `name` with its timers on `cpu`, or anywhere for `nil`.
    ///
    /// - Throws: ``Refusal`` when engine-rt's policy is refused; the engine's error otherwise.
    private func subject(_ name: String, cpu: Int?) throws -> any JitterSubject {
        switch name {
        case "engine":
            let engine = try TimerEngine.pinned(.init(cpu: cpu))
            return SafeTimerJitterSubject(name: name, backend: .engine(engine), engine: engine)
        case "engine-rt":
            switch try self.policy.engine(priority: self.effectivePriority, cpu: cpu) {
            case .success(let engine):
                return SafeTimerJitterSubject(name: name, backend: .engine(engine), engine: engine)
            case .failure(let refusal):
                throw Refusal(reason: "\(refusal)")
            }
        case "engine-spin":
            let spinWindow = OptionConversion.nanoseconds(self.spin, nanosecondsPerUnit: 1_000)
            let engine = try TimerEngine.pinned(.init(cpu: cpu, spinWindow: .nanoseconds(spinWindow)))
            return SafeTimerJitterSubject(name: name, backend: .engine(engine), engine: engine)
        case "gcd":
            return DispatchSubject()
        case "gcd-safe":
            return SafeTimerJitterSubject(name: name, backend: .dispatch, engine: nil)
        case "nio":
            return EventLoopSubject()
        case "timerfd":
            return TimerfdLoopSubject(cpu: cpu)
        case "sleep-engine":
            return SleepJitterSubject(engine: try TimerEngine.pinned(.init(cpu: cpu)), cpu: cpu)
        case "sleep-continuous":
            return SleepJitterSubject(cpu: cpu)
        default:
            preconditionFailure("validate() let through the backend '\(name)'")
        }
    }
}

extension CPUList: ExpressibleByArgument {
    public init?(argument: String) {
        self.init(argument)
    }
}

extension MeasurementClock: ExpressibleByArgument {}
