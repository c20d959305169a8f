import Foundation
import Testing

/// Runs one test of this binary again, alone, in a child process, and expects it to pass.
///
/// For what must not happen in the test runner itself: a process-wide limit lowered, a
/// fork, or a failure that could end the process. The test is enabled only when
/// `variable` is set, which this function does for the child.
func expectTestPassesInAProcessOfItsOwn(
    _ test: String, enabledBy variable: String, environment extra: [String: String] = [:],
    sourceLocation: SourceLocation = #_sourceLocation
) throws {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    process.arguments = ["--testing-library", "swift-testing", "--filter", test]
    var environment = ProcessInfo.processInfo.environment
    environment[variable] = "1"
    environment.merge(extra) { old, new in old.isEmpty ? new : "\(old) \(new)" }
    process.environment = environment
    let output = Pipe()
    process.standardOutput = output
    process.standardError = output
    try process.run()
    let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    #expect(
        process.terminationReason == .exit && process.terminationStatus == 0 && text.contains("1 test"),
        "child exited \(process.terminationStatus) (\(process.terminationReason == .exit ? "status" : "signal")): \(text.suffix(1500))",
        sourceLocation: sourceLocation
    )
}
