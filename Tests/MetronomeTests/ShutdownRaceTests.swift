import Glibc
import Metronome
import MetronomeTestSupport
import Testing

/// Every call that meets a stopping engine answers `.engineShutDown`, whatever step of its
/// arming the stop came in, and nothing a stop or a firing ends stays counted as armed.
@Suite(.tags(.realTime))
struct ShutdownRaceTests {
    /// A shutdown on another thread lands anywhere in the schedules' armings: between the
    /// engine creating a timer and arming it, it once left an `EINVAL` from `mtr_timer_move`.
    @Test(.needsTheEngine("the engine's arming takes two C calls"), .timeLimit(.minutes(2)))
    func startRacingShutdownThrowsOnlyEngineShutDown() throws {
        for _ in 0..<1_000 {
            let engine = try TimerEngine()
            let timers = (0..<128).map { _ in SafeDispatchTimer(backend: .engine(engine)) }
            let stopper = Gate()
            let stop = try PosixThread.spawn {
                stopper.wait()
                engine.syncShutdown()
            }
            // Opened once the starts are under way, so that the stop lands among them.
            for (index, timer) in timers.enumerated() {
                if index == 8 { stopper.open() }
                do {
                    try timer.start(after: .seconds(60)) { _ in }
                } catch {
                    #expect(error == .engineShutDown, "\(error)")
                }
            }
            stop.join()
        }
    }

    /// As above, through a deadline: its timer is armed on the engine as the call begins.
    /// Every call returns; one that meets the stopped engine runs its body cancelled, as
    /// does one made after the stop, in a task of its own.
    @Test(.needsTheEngine("the engine's arming takes two C calls"), .timeLimit(.minutes(2)))
    func deadlineRacingShutdownRunsTheBodyCancelled() async throws {
        for _ in 0..<300 {
            let engine = try TimerEngine()
            let clock = EngineClock(backend: .engine(engine))
            let stopper = Gate()
            let stop = try PosixThread.spawn {
                stopper.wait()
                engine.syncShutdown()
            }
            stopper.open()
            await Task {
                for _ in 0..<16 where !Task.isCancelled {
                    _ = await withDeadline(in: .seconds(60), clock: clock) { 0 }
                }
            }.value
            stop.join()
            let ranCancelled = await Task {
                await withDeadline(in: .seconds(60), clock: clock) { Task.isCancelled }
            }.value
            #expect(ranCancelled)
        }
    }

    /// One-shots due at once fire while their arming is still being made (GCD starts a
    /// source as it arms it): each firing still counts its timer out of `armed`.
    @Test(.timeLimit(.minutes(1)))
    func oneShotsThatFireAtOnceLeaveNothingArmed() throws {
        let engine = try TimerEngine()
        defer { engine.syncShutdown() }
        let count = 1_000
        let fired = LockedCondition(0)
        let timers = (0..<count).map { _ in SafeDispatchTimer(backend: .engine(engine)) }
        for timer in timers {
            #expect(timer.schedule(after: .zero) { _ in fired.update { $0 += 1 } })
        }
        #expect(fired.wait(timeout: .seconds(30)) { $0 == count })
        #expect(engine.counters.armed == 0)
    }
}
