@preconcurrency import Dispatch
import Foundation
import Glibc
import Metronome
import Testing

/// Where the engine is compiled out (the trait `Engine` off), GCD fires an engine's timers:
/// its thread settings are refused, not ignored, and its handlers without a queue still run
/// one at a time, as on a firing thread.
@Suite(.enabled(if: !isEngineCompiledIn, "tests GCD's stand-in for a compiled-out engine"), .tags(.realTime))
struct EngineStandInTests {
    @Test func threadSettingsAreRefusedAndAConfigurationIsStillChecked() throws {
        let engine = try TimerEngine(configuration: .init(realtimePriority: 10, cpu: 0, name: "pacer"))
        let report = engine.threadReport
        #expect(report.realtimePriority == nil)
        #expect(report.cpu == nil)
        #expect(report.realtimeRefusal?.code == ENOTSUP)
        #expect(report.cpuRefusal?.code == ENOTSUP)
        #expect(report.threadName == "pacer")
        let plain = try TimerEngine().threadReport
        #expect(plain.realtimeRefusal == nil && plain.cpuRefusal == nil)
        #expect(throws: TimerError.invalidArgument) { try TimerEngine(configuration: .init(realtimePriority: 100)) }
    }

    /// A second timer due while the first one's handler blocks waits for it.
    @Test(.timeLimit(.minutes(1)))
    func handlersWithoutAQueueRunOneAtATime() throws {
        let engine = try TimerEngine()
        defer { engine.syncShutdown() }
        let (first, second) = (SafeDispatchTimer(backend: .engine(engine)), SafeDispatchTimer(backend: .engine(engine)))
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let secondRan = DispatchSemaphore(value: 0)
        #expect(
            first.schedule(after: .zero) { _ in
                entered.signal()
                release.wait()
            })
        try #require(entered.wait(timeout: .now() + 10) == .success)
        #expect(second.schedule(after: .zero) { _ in secondRan.signal() })
        #expect(secondRan.wait(timeout: .now() + .milliseconds(50)) == .timedOut, "ran beside the first handler")
        release.signal()
        #expect(secondRan.wait(timeout: .now() + 10) == .success)
    }
}
