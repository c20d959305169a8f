@preconcurrency import Dispatch
import Foundation
import Glibc
import Metronome
import MetronomeTestSupport
import Testing

/// The stop a descriptor fault makes, as the Swift layer sees it: a stop like `shutdown()`.
@Suite(.serialized)
struct EngineFaultStopTests {
    /// Runs ``faultStopInThisProcess()`` in a child: it closes descriptors of its own
    /// process, which no other test may share. The faulted engine leaves libevent's base
    /// allocated on purpose (freeing it would close descriptors by number), so the child
    /// runs without LeakSanitizer's report at exit.
    @Test(.needsTheEngine("GCD's stand-in opens no timerfd"), .timeLimit(.minutes(2)))
    func aFaultStopCancelsTheTimersAsAShutdownDoes() throws {
        try expectTestPassesInAProcessOfItsOwn(
            "faultStopInThisProcess", enabledBy: Self.childVariable, environment: ["LSAN_OPTIONS": "detect_leaks=0"])
    }

    static let childVariable = "METRONOME_FAULT_STOP_CHILD"

    /// The engine's monotonic timerfds are closed under it; the next arming on that clock
    /// meets the fault, and the engine stops itself. A running timer is then cancelled and
    /// lets go of its handler, as after `shutdown()`, and a timer scheduled afterwards
    /// refuses, where a fault stop that read as "not stopped" would leave the running timer
    /// looking armed for good.
    @Test(.enabled(if: ProcessInfo.processInfo.environment[childVariable] != nil), .timeLimit(.minutes(1)))
    func faultStopInThisProcess() throws {
        let before = Self.monotonicTimerfds()
        let engine = try TimerEngine()
        let contexts = LiveContexts()
        let running = SafeDispatchTimer(backend: .engine(engine))
        do {
            let context = contexts.make()
            #expect(running.schedule(deadline: .now() + .seconds(3_600)) { withExtendedLifetime(context) {} })
        }
        let engines = Self.monotonicTimerfds().filter { !before.contains($0) }
        try #require(!engines.isEmpty)
        for descriptor in engines { close(descriptor) }

        let meetsTheFault = SafeDispatchTimer(backend: .engine(engine))
        #expect(!meetsTheFault.schedule(deadline: .now() + .milliseconds(1)) {})
        #expect(
            eventually(timeout: .seconds(10)) { running.state == .cancelled && contexts.count == 0 },
            "the running timer is \(running.state), \(contexts.count) handler(s) alive")
        #expect(!SafeDispatchTimer(backend: .engine(engine)).schedule(deadline: .now() + .seconds(1)) {})
    }

    /// The timerfds on CLOCK_MONOTONIC open in this process, by their `/proc` entries.
    static func monotonicTimerfds() -> [Int32] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return entries.compactMap(Int32.init).filter { descriptor in
            let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(descriptor)")
            let info = try? String(contentsOfFile: "/proc/self/fdinfo/\(descriptor)", encoding: .utf8)
            return target == "anon_inode:[timerfd]" && info?.contains("clockid: \(CLOCK_MONOTONIC)\n") == true
        }
    }
}
