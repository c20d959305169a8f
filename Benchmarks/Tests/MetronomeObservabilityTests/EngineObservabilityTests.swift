// swift-format-ignore-file
// Its blocks are the README's and the articles' code, line for line
// (DocumentationSnippetTests), laid out as the reader sees them.
import Glibc
import InMemoryLogging
import Logging
import Metrics
import MetricsTestKit
import Testing

@testable import Metronome
@testable import MetronomeObservability
import MetronomeTesting

/// `MetronomeObservability` with both traits on: what reaches swift-log and swift-metrics.
@Suite
struct EngineObservabilityTests {
    static func counters(fired: UInt64 = 0, late: UInt64 = 0, missed: UInt64 = 0, armed: UInt64 = 0, clockSteps: UInt64 = 0)
        -> TimerEngine.Counters
    {
        TimerEngine.Counters(
            wakeups: fired, fired: fired, late: late, missedPeriods: missed, armed: armed, coalesced: 0,
            clockSteps: clockSteps, batched: 0, memoryBytes: armed * 64
        )
    }

    @Test func refusedThreadSettingsAreWarnings() throws {
        let engine = try TimerEngine(configuration: .init(name: "observed"))
        defer { engine.syncShutdown() }
        let handler = InMemoryLogHandler()
        let log = EngineEventLog(engine: engine, logger: Logger(label: "test") { _ in handler })
        let refusal = TimerError(code: EPERM, operation: "pthread_setschedparam")
        log.report(.init(realtimePriority: nil, realtimeRefusal: refusal, cpu: nil, cpuRefusal: nil, threadName: "observed"))
        #expect(handler.entries.map(\.level) == [.warning])
        #expect(handler.entries.first?.metadata["error"] == "\(refusal)")
        #expect(handler.entries.first?.metadata["engine"] == "observed")

        handler.clear()
        log.report(engine.threadReport)
        #expect(handler.entries.isEmpty, "an engine that asked for nothing was refused nothing")
    }

    @Test func clockStepsAndLateFiringsAreLoggedOnceEach() throws {
        let engine = try TimerEngine()
        defer { engine.syncShutdown() }
        let handler = InMemoryLogHandler()
        var log = EngineEventLog(engine: engine, logger: Logger(label: "test") { _ in handler })
        log.record(Self.counters())
        #expect(handler.entries.isEmpty)
        log.record(Self.counters(fired: 10, late: 3, missed: 7, clockSteps: 2))
        #expect(handler.entries.map(\.level) == [.notice, .warning])
        #expect(handler.entries.first?.metadata["steps"] == "2")
        #expect(handler.entries.last?.metadata["late"] == "3")
        #expect(handler.entries.last?.metadata["missedPeriods"] == "7")
        handler.clear()
        log.record(Self.counters(fired: 20, late: 3, missed: 7, clockSteps: 2))
        #expect(handler.entries.isEmpty, "nothing new happened")
    }

    @Test func countersGrowByWhatChangedAndGaugesTakeTheReading() throws {
        let engine = try TimerEngine(configuration: .init(name: "metered"))
        defer { engine.syncShutdown() }
        let metrics = TestMetrics()
        var exported = EngineMetrics(prefix: "t", engine: engine, factory: metrics)
        let dimensions = [("engine", "metered")]
        exported.record(Self.counters(fired: 5, armed: 3))
        exported.record(Self.counters(fired: 12, late: 1, armed: 2))
        #expect(try metrics.expectCounter("t_fired_total", dimensions).totalValue == 12)
        #expect(try metrics.expectCounter("t_late_total", dimensions).totalValue == 1)
        #expect(try metrics.expectGauge("t_armed_timers", dimensions).lastValue == 2)
        #expect(try metrics.expectGauge("t_memory_bytes", dimensions).lastValue == 128)
    }

    /// The export loop on a real engine, paced by virtual time: each advance is one reading.
    @Test(.timeLimit(.minutes(1)))
    func exportReadsTheEngineAtEachPace() async throws {
        let engine = try TimerEngine(configuration: .init(name: "paced"))
        let timeline = ManualTimeline()
        let metrics = TestMetrics()
        let exporting = Task { await engine.exportMetrics(prefix: "p", every: .seconds(1), pacedBy: .custom(timeline), factory: metrics) }
        await timeline.waitForArmedTimers(1)
        let timer = SafeDispatchTimer(backend: .engine(engine))
        let fired = AsyncStream.makeStream(of: Void.self)
        #expect(timer.schedule(after: .zero) { _ in fired.continuation.yield() })
        for await _ in fired.stream { break }
        timeline.advance(by: .seconds(1))
        exporting.cancel()
        await exporting.value
        #expect(try metrics.expectCounter("p_fired_total", [("engine", "paced")]).totalValue == 1)
        #expect(timeline.armedCount == 0, "cancelling the task disarmed its pace")
        await engine.shutdown()
    }

    /// The README's example, as it is shown there: both loops pace themselves with a timer
    /// on the engine, and cancelling their tasks disarms both.
    @Test(.timeLimit(.minutes(1)))
    func readmeExample() async throws {
        let engine = try TimerEngine(configuration: .init(name: "pacer"))
        let metrics = Task { await engine.exportMetrics() }              // counters as metrics
        let events = Task { await engine.logEvents(to: Logger(label: "metronome")) }
        while engine.counters.armed < 2 { try await Task.sleep(for: .milliseconds(1)) }
        metrics.cancel()
        events.cancel()
        await metrics.value
        await events.value
        #expect(engine.counters.armed == 0)
    }
}
