@preconcurrency import Dispatch
import Foundation
import Glibc

/// Runs the package's own executables from tests, as child processes: what a crash or a
/// whole CLI run needs, so the test process itself survives.
public enum ChildProcess {
    /// How a child process ended and what it printed.
    public struct Outcome: Sendable {
        public var reason: Process.TerminationReason
        public var status: Int32
        public var stdout: String
        public var stderr: String

        /// Standard output, one element per line.
        public var lines: [String] { self.stdout.split(separator: "\n").map(String.init) }
    }

    public struct NotFound: Error, CustomStringConvertible {
        public var description: String
    }

    /// The product `name` from the directory the test binary was built into, building it
    /// there (same configuration and sanitizer) when it is missing.
    ///
    /// `swift test` holds the scratch directory's lock while tests run; its own build has
    /// finished by then, so the nested build ignores the lock instead of waiting for ever.
    public static func product(_ name: String, packageFile: String = #filePath) -> Result<URL, NotFound> {
        let me = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        let products = me.deletingLastPathComponent()
        let url = products.appendingPathComponent(name)
        if FileManager.default.isExecutableFile(atPath: url.path) { return .success(url) }

        let configuration = products.lastPathComponent  // debug or release
        let scratch = products.deletingLastPathComponent().deletingLastPathComponent()
        let package = URL(fileURLWithPath: packageFile).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        var arguments = [
            "swift", "build", "--product", name, "--package-path", package.path,
            "--scratch-path", scratch.path, "--configuration", configuration, "--ignore-lock",
        ]
        if dlsym(dlopen(nil, RTLD_NOW), "__tsan_init") != nil { arguments.append("--sanitize=thread") }
        if dlsym(dlopen(nil, RTLD_NOW), "__asan_init") != nil { arguments.append("--sanitize=address") }
        let command = arguments.joined(separator: " ")
        guard let build = try? self.run(URL(fileURLWithPath: "/usr/bin/env"), arguments, timeout: 1200),
            build.status == 0, FileManager.default.isExecutableFile(atPath: url.path)
        else {
            return .failure(NotFound(description: "\(name) not found next to \(me.path), and `\(command)` failed"))
        }
        return .success(url)
    }

    /// Runs `executable` to completion, killing it after `timeout` seconds, in
    /// `currentDirectory` if given (for a child that may write files where it runs).
    ///
    /// The Swift runtime's backtracer is off: it adds time to every expected crash, and the
    /// signal is all a test needs.
    public static func run(
        _ executable: URL, _ arguments: [String], timeout: Double, currentDirectory: URL? = nil
    ) throws -> Outcome {
        let process = Process()
        process.executableURL = executable
        process.currentDirectoryURL = currentDirectory
        process.arguments = arguments
        var environment = ProcessInfo.processInfo.environment
        environment["SWIFT_BACKTRACE"] = "enable=no"
        process.environment = environment
        let stdout = Pipe()
        let stderr = Pipe()
        process.standardOutput = stdout
        process.standardError = stderr
        try process.run()
        let pid = process.processIdentifier
        let watchdog = DispatchWorkItem { kill(pid, SIGKILL) }
        DispatchQueue.global().asyncAfter(deadline: .now() + timeout, execute: watchdog)
        // Drain stderr concurrently: a sanitizer report can outgrow the pipe's buffer.
        let errors = DispatchGroup()
        nonisolated(unsafe) var errorData = Data()
        errors.enter()
        Thread {
            errorData = stderr.fileHandleForReading.readDataToEndOfFile()
            errors.leave()
        }.start()
        let out = stdout.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        watchdog.cancel()
        errors.wait()
        return Outcome(
            reason: process.terminationReason,
            status: process.terminationStatus,
            stdout: String(decoding: out, as: UTF8.self),
            stderr: String(decoding: errorData, as: UTF8.self)
        )
    }
}
