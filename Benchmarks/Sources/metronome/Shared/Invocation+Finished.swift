import Foundation
import MetronomeMeasurements

extension Invocation {
    /// This process's invocation, measuring since `startedAt` and ending now.
    static func finished(startedAt: Date) -> Invocation {
        Invocation(
            toolVersion: MetronomeVersion.current, commandLine: CommandLine.arguments, startedAt: startedAt,
            endedAt: Date())
    }
}
