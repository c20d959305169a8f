import Foundation
import MetronomeMeasurements

/// cyclictest (rt-tests) itself, as a row beside the backends: the reference every Linux
/// latency figure is compared with, run with the same period and sample count.
///
/// It runs its measuring threads under `policy` at `priority`, as `engine-rt` does, with
/// `-v -N` so every loop's latency comes out in nanoseconds and in order; each thread's
/// recorder then drops the same warm-up as for every other backend. Its own CPU time is a
/// child's, so its `CPU ms/1k` is only this process's, reading cyclictest's output.
struct CyclictestSubject: JitterSubject {
    let name = "cyclictest"
    let executable: URL
    let policy: SchedulingPolicy
    let priority: Int
    let lockMemory: Bool
    /// Monotonic or wall: cyclictest has no boottime clock.
    let clock: MeasurementClock
    /// The measuring threads' CPUs (`nil` entries: not pinned) as `-t` and `-a` give them, or
    /// `nil` for cyclictest's one unpinned thread, measured as a whole.
    let cpus: [Int?]?
    /// Whether `--smp` chose the threads: passed on as cyclictest's own `--smp`.
    let smp: Bool

    /// Loops run past the ones recorded.
    static let spareLoops = 10

    /// cyclictest from `PATH`, or `nil` when it is not installed.
    static func installed() -> URL? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        return path.split(separator: ":").map { URL(fileURLWithPath: String($0)).appendingPathComponent("cyclictest") }
            .first { FileManager.default.isExecutableFile(atPath: $0.path) }
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    func run(_ config: JitterConfiguration, recorder: LatencyRecorder) throws -> SubjectCounters {
        // cyclictest's verbose printer can stop before a thread's last loop or two are
        // printed; the spare loops make up for them, and the recorders ignore any past target.
        let loops = config.warmup + config.samples + Self.spareLoops
        let threads = self.cpus?.count ?? 1
        let pinned = self.cpus?.compactMap { $0 } ?? []
        var threadArguments: [String] = []
        if self.smp {
            threadArguments = ["--smp"]
        } else if self.cpus != nil {
            threadArguments = ["-t", "\(threads)"] + (pinned.isEmpty ? [] : ["-a", CPUList(pinned).description])
        }
        // cyclictest lengthens each further thread's period by -d (500 µs by default); every
        // other backend's threads share one period.
        if threads > 1 { threadArguments += ["-d", "0"] }
        let process = Process()
        process.executableURL = self.executable
        process.arguments =
            [
                "-q", "-v", "-N", "-i", "\(max(1, config.intervalNanoseconds / 1_000))", "-l", "\(loops)",
                "--policy=\(self.policy.rawValue)", "-p", "\(self.priority)", "-c", self.clock == .wall ? "1" : "0",
            ] + threadArguments + (self.lockMemory ? ["-m"] : [])
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard process.terminationReason == .exit, process.terminationStatus == 0 else {
            throw Failure(
                description:
                    "cyclictest \(process.arguments!.joined(separator: " ")) ended with status \(process.terminationStatus)"
            )
        }
        let recorders = (0..<threads).map { _ in recorder.sibling() }
        // Verbose lines are "thread: loop: latency".
        var wakeups = 0
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: ":").map { $0.trimmingCharacters(in: .whitespaces) }
            guard fields.count == 3, let thread = Int(fields[0]), recorders.indices.contains(thread),
                Int(fields[1]) != nil,
                let lateness = Int64(fields[2])
            else { continue }
            recorders[thread].record(scheduledNanoseconds: 0, firedNanoseconds: lateness, missed: 0)
            wakeups += 1
        }
        recorders.forEach(recorder.merge)
        // cyclictest walks its CPU set in ascending order, whatever order -a listed it in.
        let ascending = pinned.sorted()
        let threadCPUs = ascending.isEmpty ? Array(repeating: nil, count: threads) : ascending.map(Optional.some)
        let threadResults = self.cpus.map { _ in
            recorders.indices.map { JitterThreadResult(thread: $0, cpu: threadCPUs[$0], recorder: recorders[$0]) }
        }
        let placement = ascending.isEmpty ? "" : " pinned to CPUs \(CPUList(ascending))"
        return SubjectCounters(
            wakeups: wakeups,
            note:
                "cyclictest: --policy \(self.policy.rawValue) priority \(self.priority), \(threads) thread(s)\(placement); "
                + "CPU ms/1k is this process reading its output, not cyclictest's own",
            threads: threadResults)
    }
}
