import Metronome
import MetronomeTestSupport
import Testing

/// Built without the `Engine` trait, every description says that GCD serves and shows no
/// setting GCD does not apply: no real-time priority, CPU, spin window, late threshold or
/// shard count, and of the counters only `armed`.
@Suite(.enabled(if: !isEngineCompiledIn, "describes the GCD stand-in for a compiled-out engine"))
struct EnginelessDescriptionTests {
    static let unapplied = ["realtimePriority: 50", "cpu: 0", "spinWindow", "lateThreshold", "shards", "wakeups"]

    @Test
    func aConfigurationSaysGCDServesAndShowsOnlyTheQueueName() {
        let configuration = TimerEngine.Configuration(
            realtimePriority: 50, cpu: 0, spinWindow: .microseconds(20), name: "pacer", shards: 4)
        #expect(configuration.description == "GCD serves: built without the Engine trait, queue: pacer")
        #expect(
            TimerEngine.Configuration().description == "GCD serves: built without the Engine trait, queue: metronome")
    }

    @Test
    func anEngineSaysGCDServesAndCountsOnlyItsArmedTimers() throws {
        let engine = try TimerEngine(configuration: .init(realtimePriority: 50, cpu: 0, name: "pacer", shards: 4))
        defer { engine.syncShutdown() }
        let timer = SafeDispatchTimer(backend: .engine(engine))
        #expect(timer.schedule(after: .seconds(3_600)) { _ in })
        #expect(engine.description == "TimerEngine(GCD serves: built without the Engine trait, queue: pacer; armed: 1)")
        #expect(engine.debugDescription.hasPrefix("\(engine.description.dropLast()); realtimePriority: refused ("))
        #expect(engine.debugDescription.contains("; cpu: refused ("))
        for setting in Self.unapplied {
            #expect(!engine.description.contains(setting), "\(setting) shown")
            #expect(!engine.debugDescription.contains(setting), "\(setting) shown")
        }
        #expect(timer.description == "SafeDispatchTimer(running, engine (GCD), monotonic)")
        #expect(timer.cancel())
    }

    /// What `debugDescription` adds is a refusal, and only for a setting that was asked for.
    @Test
    func anEngineWithNothingRefusedAddsNothing() throws {
        let engine = try TimerEngine()
        defer { engine.syncShutdown() }
        #expect(engine.debugDescription == engine.description)
    }
}
