@preconcurrency import Dispatch
import Foundation
import Glibc
import MetronomeTesting
import Testing

@testable import Metronome

/// An engine shut down under its timers stops them and refuses new ones; a configuration it
/// cannot honour is refused by name.
@Suite(.serialized, .tags(.realTime))
struct EngineShutdownTests {
    @Test(.timeLimit(.minutes(1)), arguments: [false, true])
    func shutDownEngineStopsTimersAndRefusesNewOnes(onQueue: Bool) throws {
        let harness = try EngineHarness()
        defer { harness.tearDown() }
        let engine = harness.engine
        let recorder = TickRecorder(harness)
        let armedBefore = harness.makeTimer(queue: onQueue ? markedQueue("metronome.tests.shutdown") : nil)
        #expect(
            armedBefore.schedule(
                deadline: harness.deadline(after: .milliseconds(1)), repeating: .milliseconds(5),
                handler: recorder.handler))
        #expect(harness.wait(for: recorder, count: 2))

        engine.syncShutdown()
        let epoch = recorder.bumpEpoch()
        engine.syncShutdown()  // idempotent
        #expect(engine.counters.armed == 0)
        harness.advance(by: .milliseconds(40))
        // Inline handlers: shutdown waited for the running one, so none starts later. On a
        // queue, one delivery already queued may still run.
        #expect(recorder.records(since: epoch).count <= (onQueue ? 1 : 0), "fired after the engine shut down")

        let later = harness.makeTimer()
        #expect(!later.schedule(deadline: harness.deadline(after: .milliseconds(1)), handler: recorder.handler))
        #expect(later.state == .idle, "a refused schedule does nothing")
        #expect(!later.schedule(interval: 0.001, handler: recorder.untimedHandler))
        #expect(later.state == .idle)

        // The timer armed before the shutdown was cancelled by it, and is still safe to use.
        #expect(armedBefore.state == .cancelled)
        #expect(!armedBefore.suspend())
        #expect(!armedBefore.resume())
        #expect(!armedBefore.cancel())
        #expect(!armedBefore.schedule(deadline: harness.deadline(after: .milliseconds(1)), handler: recorder.handler))
        #expect(armedBefore.state == .cancelled)
        armedBefore.cancelAndWait()
        harness.advance(by: .milliseconds(10))
        #expect(recorder.records(since: epoch).count <= (onQueue ? 1 : 0))
    }

    static let badConfigurations: [(String, TimerEngine.Configuration)] = [
        ("realtimePriority 0", .init(realtimePriority: 0)),
        ("realtimePriority 100", .init(realtimePriority: 100)),
        ("realtimePriority -1", .init(realtimePriority: -1)),
        ("cpu 100000", .init(cpu: 100_000)),
        ("cpu -2", .init(cpu: -2)),
        ("negative spinWindow", .init(spinWindow: .milliseconds(-1))),
        ("negative lateThreshold", .init(lateThreshold: .milliseconds(-1))),
    ]

    @Test(.timeLimit(.minutes(1)), arguments: Self.badConfigurations.indices)
    func badEngineConfigurationThrowsEINVAL(index: Int) {
        let (name, configuration) = Self.badConfigurations[index]
        do {
            let engine = try TimerEngine(configuration: configuration)
            engine.syncShutdown()
            Issue.record("\(name): the engine started")
        } catch {
            #expect(error.code == EINVAL, "\(name): \(error)")
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func realtimePriorityIsGrantedOrItsRefusalReported() throws {
        let harness = try EngineHarness(configuration: .init(realtimePriority: 10))
        defer { harness.tearDown() }
        let report = harness.engine.threadReport
        print(
            "realtimePriority 10: granted \(String(describing: report.realtimePriority)), refusal \(String(describing: report.realtimeRefusal))"
        )
        if let priority = report.realtimePriority {
            #expect(priority == 10)
            #expect(report.realtimeRefusal == nil)
        } else {
            let refusal = try #require(report.realtimeRefusal, "neither granted nor refused: \(report)")
            #expect(refusal.code != 0)
        }
        // Either way the engine fires.
        let recorder = TickRecorder(harness)
        let timer = harness.makeTimer()
        #expect(timer.schedule(deadline: harness.deadline(after: .milliseconds(1)), handler: recorder.handler))
        #expect(harness.wait(for: recorder, count: 1))
    }
}
