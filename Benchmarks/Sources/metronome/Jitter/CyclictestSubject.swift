import Foundation
import MetronomeMeasurements

/// cyclictest (rt-tests) itself, as a row beside the backends: the reference every Linux
/// latency figure is compared with, run with the same period and sample count.
///
/// It runs one measuring thread under `policy` at `priority`, as `engine-rt` does, with `-v -N`
/// so every loop's latency comes out in nanoseconds and in order; the recorder then drops
/// the same warm-up as for every other backend. Its own CPU time is a child's, so its
/// `CPU ms/1k` is only this process's, reading cyclictest's output.
struct CyclictestSubject: JitterSubject {
    let name = "cyclictest"
    let executable: URL
    let policy: SchedulingPolicy
    let priority: Int
    let lockMemory: Bool
    /// Monotonic or wall: cyclictest has no boottime clock.
    let clock: MeasurementClock

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
        let loops = config.warmup + config.samples
        let process = Process()
        process.executableURL = self.executable
        process.arguments = [
            "-q", "-v", "-N", "-i", "\(max(1, config.intervalNanoseconds / 1_000))", "-l", "\(loops)",
            "--policy=\(self.policy.rawValue)", "-p", "\(self.priority)", "-c", self.clock == .wall ? "1" : "0",
        ] + (self.lockMemory ? ["-m"] : [])
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard process.terminationReason == .exit, process.terminationStatus == 0 else {
            throw Failure(description: "cyclictest \(process.arguments!.joined(separator: " ")) ended with status \(process.terminationStatus)")
        }
        // Verbose lines are "thread: loop: latency".
        var wakeups = 0
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: ":").map { $0.trimmingCharacters(in: .whitespaces) }
            guard fields.count == 3, fields[0] == "0", Int(fields[1]) != nil, let lateness = Int64(fields[2]) else { continue }
            recorder.record(scheduledNanoseconds: 0, firedNanoseconds: lateness, missed: 0)
            wakeups += 1
        }
        return SubjectCounters(wakeups: wakeups, note: "cyclictest: --policy \(self.policy.rawValue) priority \(self.priority), 1 thread; CPU ms/1k is this process reading its output, not cyclictest's own")
    }
}
