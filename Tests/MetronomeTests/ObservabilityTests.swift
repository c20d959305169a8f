import Glibc
import MetronomeTestSupport
import MetronomeTesting
import Testing

@testable import Metronome

/// What the library says about itself: descriptions of timers, ticks and engines, and
/// configuration errors that name the setting.
@Suite
struct ObservabilityTests {
    // MARK: SafeDispatchTimer

    @Test
    func timerDescribesItsStateBackendAndClockInEveryState() {
        let timeline = ManualTimeline()
        let timer = SafeDispatchTimer(backend: .custom(timeline), clock: .boottime)
        #expect(timer.description == "SafeDispatchTimer(idle, custom(ManualTimeline), boottime)")
        #expect(timer.debugDescription.hasSuffix("clock: boottime, schedule: none)"))

        #expect(timer.schedule(after: .seconds(1), every: .seconds(2), leeway: .milliseconds(1)) { _ in })
        #expect(timer.description == "SafeDispatchTimer(running, custom(ManualTimeline), boottime)")
        #expect(
            timer.debugDescription
                == "SafeDispatchTimer(state: running, backend: custom(ManualTimeline), clock: boottime, schedule: at 1000000000 ns every 2000000000 ns, leeway 1000000 ns)"
        )
        #expect(timer.suspend())
        #expect(timer.description == "SafeDispatchTimer(suspended, custom(ManualTimeline), boottime)")
        #expect(timer.currentSchedule?.periodNanoseconds == 2_000_000_000)
        #expect(timer.cancel())
        #expect(timer.description == "SafeDispatchTimer(cancelled, custom(ManualTimeline), boottime)")
        #expect(timer.currentSchedule == nil)
    }

    @Test(.needsTheEngine("without it the engine backend says GCD serves (EnginelessDescriptionTests)"))
    func timerReportsTheBackendItWasGiven() throws {
        let engine = try TimerEngine()
        defer { engine.syncShutdown() }
        let onEngine = SafeDispatchTimer(backend: .engine(engine))
        #expect(onEngine.backend.engine === engine)
        #expect(onEngine.description == "SafeDispatchTimer(idle, engine, monotonic)")
        let onDispatch = SafeDispatchTimer(backend: .dispatch, clock: .wall)
        #expect(onDispatch.backend.engine == nil)
        #expect(onDispatch.description == "SafeDispatchTimer(idle, dispatch, wall)")
        #expect(SafeDispatchTimer().backend.engine === TimerEngine.shared)
    }

    // MARK: Tick

    @Test
    func tickDescribesTheFiring() {
        let tick = Tick(
            scheduled: TimerInstant(nanoseconds: 3_000_000),
            fired: TimerInstant(nanoseconds: 3_012_000),
            missed: 2,
            sequence: 5
        )
        #expect(tick.description == "tick #5 at 3000000 ns, \(Duration.microseconds(12)) late, 2 missed")
        #expect(tick.debugDescription == "Tick(sequence: 5, scheduled: 3000000 ns, fired: 3012000 ns, missed: 2)")
    }

    // MARK: TimerEngine

    @Test
    func countersNameEveryCounter() {
        let counters = TimerEngine.Counters(
            wakeups: 1, fired: 2, late: 3, missedPeriods: 4, armed: 5, coalesced: 6, clockSteps: 7, batched: 8,
            memoryBytes: 9, takeovers: 10)
        #expect(
            counters.description
                == "wakeups: 1, fired: 2, late: 3, missedPeriods: 4, armed: 5, coalesced: 6, clockSteps: 7, batched: 8, memoryBytes: 9, takeovers: 10"
        )
    }

    @Test(.needsTheEngine("without it an engine describes GCD (EnginelessDescriptionTests)"))
    func engineDescribesItsConfigurationAndCounters() throws {
        let configuration = TimerEngine.Configuration(spinWindow: .microseconds(20))
        let engine = try TimerEngine(configuration: configuration)
        defer { engine.syncShutdown() }
        #expect(
            configuration.description
                == "realtimePriority: none, cpu: none, spinWindow: \(Duration.microseconds(20)), lateThreshold: \(Duration.milliseconds(1)), name: numbered, shards: 1"
        )
        // Nothing armed or fired on a new engine, so the counters are stable between reads.
        #expect(engine.description == "TimerEngine(\(configuration); \(engine.counters))")
        #expect(
            engine.debugDescription
                == "TimerEngine(\(configuration); \(engine.counters); thread: \(engine.threadReport.threadName), realtimePriority: none, cpu: none)"
        )
    }

    @Test
    func threadReportNamesARefusal() {
        let report = TimerEngine.ThreadReport(
            realtimePriority: nil,
            realtimeRefusal: TimerError(code: EPERM, operation: "pthread_setschedparam"),
            cpu: 1,
            cpuRefusal: nil,
            threadName: "pacer"
        )
        #expect(
            report.description
                == "thread: pacer, realtimePriority: refused (the firing thread may not take a real-time priority without CAP_SYS_NICE), cpu: 1"
        )
    }

    // MARK: TimerError and configuration checks

    @Test
    func errorWithoutASettingKeepsItsFormat() {
        let error = TimerError(code: EMFILE, operation: "mtr_engine_create")
        #expect(error.setting == nil)
        #expect(error.reason == nil)
        #expect(error.description == "the process ran out of file descriptors")
        #expect(
            error.debugDescription
                == "\(error) (mtr_engine_create: \(String(cString: strerror(EMFILE))), errno \(EMFILE))")
    }

    static let badConfigurations: [(setting: String, reason: String, configuration: TimerEngine.Configuration)] = [
        ("realtimePriority", "must be nil or in 1...99, not 0", .init(realtimePriority: 0)),
        ("realtimePriority", "must be nil or in 1...99, not 100", .init(realtimePriority: 100)),
        ("cpu", "must be nil or in 0..<\(min(sysconf(Int32(_SC_NPROCESSORS_CONF)), 1024)), not -2", .init(cpu: -2)),
        (
            "cpu", "must be nil or in 0..<\(min(sysconf(Int32(_SC_NPROCESSORS_CONF)), 1024)), not 100000",
            .init(cpu: 100_000)
        ),
        (
            "spinWindow", "must be in 0...\(Duration.milliseconds(1)), not \(Duration.milliseconds(-1))",
            .init(spinWindow: .milliseconds(-1))
        ),
        (
            "spinWindow", "must be in 0...\(Duration.milliseconds(1)), not \(Duration.seconds(Int64.max))",
            .init(spinWindow: .seconds(Int64.max))
        ),
        (
            "spinWindow", "must be in 0...\(Duration.milliseconds(1)), not \(Duration.seconds(2))",
            .init(spinWindow: .seconds(2))
        ),
        (
            "lateThreshold", "must be at least a nanosecond, not \(Duration.zero)",
            .init(lateThreshold: .zero)
        ),
        ("shards", "must be in 1...64, not 0", .init(shards: 0)),
        ("shards", "must be in 1...64, not 65", .init(shards: 65)),
        ("shards", "must be in 1...64, not \(Int.min)", .init(shards: .min)),
    ]

    @Test(arguments: Self.badConfigurations.indices)
    func configurationCheckNamesTheSettingAndItsRange(index: Int) {
        let (setting, reason, configuration) = Self.badConfigurations[index]
        #expect(throws: TimerError.self) { try configuration.validate() }
        do {
            try configuration.validate()
        } catch {
            #expect(error.code == EINVAL)
            #expect(error.operation == "mtr_engine_create")
            #expect(error.setting == setting)
            #expect(error.reason == reason)
            #expect(error.description == "\(setting) \(reason)")
        }
    }

    @Test(arguments: [
        TimerEngine.Configuration(),
        .init(realtimePriority: 1), .init(realtimePriority: 99), .init(cpu: 0),
        .init(spinWindow: .microseconds(20), lateThreshold: .nanoseconds(1)),
        .init(shards: 64),
    ])
    func configurationCheckAcceptsWhatAnEngineHonours(configuration: TimerEngine.Configuration) throws {
        try configuration.validate()
    }
}
