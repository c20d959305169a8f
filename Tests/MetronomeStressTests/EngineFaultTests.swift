@preconcurrency import Dispatch
import Foundation
import Glibc
import Metronome
import MetronomeTestSupport
import Synchronization
import Testing

/// Counts the handler contexts alive: every handler closure captures one.
final class LiveContexts: Sendable {
    final class Context: Sendable {
        private let owner: LiveContexts

        init(_ owner: LiveContexts) {
            self.owner = owner
            owner.live.add(1, ordering: .relaxed)
        }

        deinit {
            self.owner.live.subtract(1, ordering: .relaxed)
        }
    }

    fileprivate let live = Atomic<Int>(0)

    func make() -> Context { Context(self) }
    var count: Int { self.live.load(ordering: .acquiring) }
}

/// A counter handlers bump, readable from the test.
final class Counter: Sendable {
    private let value = Atomic<Int>(0)
    func increment() { self.value.add(1, ordering: .relaxed) }
    var count: Int { self.value.load(ordering: .relaxed) }
}

/// The faults that concern a whole engine: shutdown in
/// every situation, descriptor exhaustion, a blocking handler, a wall-clock step and a
/// refused real-time priority. Each has a defined outcome: no crash, nothing leaked.
@Suite(.serialized)
struct EngineFaultTests {
    /// Shutdown with one timer mid-handler (blocked on a semaphore), one armed far ahead and
    /// one suspended: it returns only after the handler returns, with the two running timers
    /// cancelled and their handlers released; then every timer refuses to arm, nothing
    /// fires, and the suspended timer's refused resume releases the last handler.
    @Test(.timeLimit(.minutes(2)))
    func shutdownWithTimersArmedSuspendedAndMidHandler() throws {
        let engine = try TimerEngine()
        let contexts = LiveContexts()
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let busyFirings = Counter()
        let otherFirings = Counter()

        var busy: SafeDispatchTimer? = SafeDispatchTimer(backend: .engine(engine))
        var armed: SafeDispatchTimer? = SafeDispatchTimer(backend: .engine(engine))
        var suspended: SafeDispatchTimer? = SafeDispatchTimer(backend: .engine(engine))
        do {
            let context = contexts.make()
            #expect(
                busy!.schedule(deadline: .now(), repeating: .milliseconds(1)) { _ in
                    withExtendedLifetime(context) {}
                    if busyFirings.count == 0 {
                        entered.signal()
                        release.wait()
                    }
                    busyFirings.increment()
                })
        }
        for timer in [armed!, suspended!] {
            let context = contexts.make()
            #expect(
                timer.schedule(deadline: .now() + .seconds(5)) { _ in
                    withExtendedLifetime(context) {}
                    otherFirings.increment()
                })
        }
        #expect(suspended!.suspend())
        #expect(entered.wait(timeout: .now() + 5) == .success)

        let shutdownReturned = Atomic<Bool>(false)
        let shutdownThread = Atomic<Int32>(0)
        let shutdownDone = DispatchSemaphore(value: 0)
        Thread {
            shutdownThread.store(KernelThread.currentID(), ordering: .releasing)
            engine.syncShutdown()
            shutdownReturned.store(true, ordering: .sequentiallyConsistent)
            shutdownDone.signal()
        }.start()
        // Either the shutdown returned or its thread went to sleep, waiting: then it had
        // done all it could without the handler, and had it not waited it would have returned.
        #expect(
            eventually(timeout: .seconds(10)) {
                let thread = shutdownThread.load(ordering: .acquiring)
                return shutdownReturned.load(ordering: .sequentiallyConsistent)
                    || (thread != 0 && KernelThread.state(ofThread: thread) == "S")
            })
        let returnedEarly = shutdownReturned.load(ordering: .sequentiallyConsistent)
        #expect(!returnedEarly, "shutdown returned while a handler ran")
        release.signal()
        #expect(shutdownDone.wait(timeout: .now() + 5) == .success, "shutdown did not return after the handler")

        // The running timers are cancelled and let go of their handlers; the suspended one
        // keeps its handler until its resume is refused.
        #expect([busy!, armed!, suspended!].map(\.state) == [.cancelled, .cancelled, .suspended])
        #expect(contexts.count == 1, "\(contexts.count) handler contexts alive after shutdown")

        // Stopped: nothing armed, nothing fires, nothing arms again.
        #expect(engine.counters.armed == 0)
        let firedAtShutdown = busyFirings.count
        usleep(20_000)
        #expect(busyFirings.count == firedAtShutdown)
        #expect(otherFirings.count == 0)
        #expect(!suspended!.resume(), "resume armed a timer on a stopped engine")
        #expect(suspended!.state == .cancelled)
        #expect(contexts.count == 0, "\(contexts.count) handler contexts alive after a refused resume")
        for timer in [busy!, armed!, suspended!] {
            timer.cancel()
            #expect(!timer.schedule(deadline: .now()) { _ in }, "schedule armed a timer on a stopped engine")
        }
        let fresh = SafeDispatchTimer(backend: .engine(engine))
        #expect(!fresh.schedule(interval: 0.001) {})
        engine.syncShutdown()  // idempotent

        (busy, armed, suspended) = (nil, nil, nil)
        #expect(eventually { contexts.count == 0 }, "\(contexts.count) handler contexts leaked")
    }

    /// Shutdown from a handler of the same engine returns instead of waiting for that
    /// handler, which would never end; the engine stops when the handler returns, and
    /// cancels the other running timer.
    @Test(.timeLimit(.minutes(2)))
    func shutdownFromInsideAHandler() throws {
        let engine = try TimerEngine()
        let contexts = LiveContexts()
        // The bystander's firings when shutdown returned: the stop lets none follow.
        let firedBeforeShutdown = Atomic<Int>(-1)
        let done = DispatchSemaphore(value: 0)
        let other = Counter()
        var timer: SafeDispatchTimer? = SafeDispatchTimer(backend: .engine(engine))
        var bystander: SafeDispatchTimer? = SafeDispatchTimer(backend: .engine(engine))
        do {
            let context = contexts.make()
            #expect(
                bystander!.schedule(deadline: .now() + .milliseconds(30), repeating: .milliseconds(1)) { _ in
                    withExtendedLifetime(context) {}
                    other.increment()
                })
        }
        do {
            let context = contexts.make()
            #expect(
                timer!.schedule(deadline: .now() + .milliseconds(1)) { _ in
                    withExtendedLifetime(context) {}
                    engine.syncShutdown()
                    firedBeforeShutdown.store(other.count, ordering: .relaxed)
                    done.signal()
                })
        }
        #expect(done.wait(timeout: .now() + 10) == .success, "shutdown from a handler waited for that handler")
        #expect(eventually { engine.counters.armed == 0 })
        usleep(50_000)
        let firedAtShutdown = firedBeforeShutdown.load(ordering: .relaxed)
        #expect(other.count == firedAtShutdown, "a timer fired after the engine was shut down from a handler")
        #expect(!SafeDispatchTimer(backend: .engine(engine)).schedule(interval: 0.001) {})
        // The fired one-shot is idle; the repeating bystander is cancelled by the stop. Both
        // have let go of their handlers while still held.
        #expect(timer!.state == .idle)
        #expect(eventually { bystander!.state == .cancelled }, "a running timer outlived the stop")
        #expect(eventually { contexts.count == 0 }, "\(contexts.count) handler contexts alive after shutdown")
        (timer, bystander) = (nil, nil)
    }

    /// With the process out of descriptors, creating an engine throws `EMFILE` (or `ENFILE`)
    /// instead of crashing; once descriptors are available again it works.
    ///
    /// The limit is process-wide, and a failure may end the process, so the check runs in a
    /// child: this test binary again, running only ``descriptorExhaustionInThisProcess()``.
    @Test(.needsTheEngine("GCD's stand-in opens no descriptors"), .timeLimit(.minutes(2)))
    func descriptorExhaustionAtEngineCreation() throws {
        try expectTestPassesInAProcessOfItsOwn("descriptorExhaustionInThisProcess", enabledBy: Self.childVariable)
    }

    static let childVariable = "METRONOME_DESCRIPTOR_EXHAUSTION_CHILD"

    @Test(.enabled(if: ProcessInfo.processInfo.environment[childVariable] != nil), .timeLimit(.minutes(1)))
    func descriptorExhaustionInThisProcess() throws {
        var original = rlimit()
        #expect(getrlimit(openFilesLimit, &original) == 0)
        // The limit bounds descriptor *numbers*: a limit at the lowest free number leaves no
        // room, even where closed descriptors left holes below the highest one.
        let lowest = dup(STDIN_FILENO)
        #expect(lowest >= 0)
        close(lowest)
        var lowered = original
        lowered.rlim_cur = rlim_t(max(lowest, 0))
        #expect(setrlimit(openFilesLimit, &lowered) == 0)
        let result: Result<TimerEngine, TimerError>
        do throws(TimerError) {
            result = .success(try TimerEngine())
        } catch {
            result = .failure(error)
        }
        #expect(setrlimit(openFilesLimit, &original) == 0)
        switch result {
        case .success:
            Issue.record("TimerEngine() succeeded with RLIMIT_NOFILE at \(lowest), the lowest free descriptor")
        case .failure(let error):
            #expect(error.code == EMFILE || error.code == ENFILE, "\(error)")
        }
        let engine = try TimerEngine()
        let fired = DispatchSemaphore(value: 0)
        let timer = SafeDispatchTimer(backend: .engine(engine))
        #expect(timer.schedule(deadline: .now()) { _ in fired.signal() })
        #expect(fired.wait(timeout: .now() + 5) == .success)
    }

    /// One firing thread per engine: a handler that blocks for 50 ms delays every other timer
    /// of that engine. A 1 ms repeating timer then gets one late tick reporting the skipped
    /// periods in `missed` (no burst), and the engine counts the firing as late. Give long
    /// handlers their own engine, or a `queue:` so they run off the firing thread.
    @Test(.needsTheEngine("counts late firings and missed periods"), .timeLimit(.minutes(2)))
    func blockingHandlerDelaysOtherTimersOfItsEngine() throws {
        let engine = try TimerEngine()
        let ticks = LockedCondition<[Tick]>([])
        // The fast timer's ticks when the block began: it cannot tick during the block.
        let ticksBeforeTheBlock = Atomic<Int>(-1)
        let blocked = DispatchSemaphore(value: 0)
        let fast = SafeDispatchTimer(backend: .engine(engine))
        let slow = SafeDispatchTimer(backend: .engine(engine))
        #expect(
            fast.schedule(deadline: .now(), repeating: .milliseconds(1), leeway: .nanoseconds(0)) { tick in
                ticks.update { $0.append(tick) }
            })
        usleep(10_000)
        let lateBefore = engine.counters.late
        #expect(
            slow.schedule(deadline: .now() + .milliseconds(2)) { _ in
                ticksBeforeTheBlock.store(ticks.withLock { $0.count }, ordering: .releasing)
                usleep(50_000)
                blocked.signal()
            })
        #expect(blocked.wait(timeout: .now() + 5) == .success)
        let before = ticksBeforeTheBlock.load(ordering: .acquiring)
        #expect(ticks.wait(timeout: .seconds(10)) { $0.count > before })
        fast.cancelAndWait()
        let all = ticks.withLock { $0 }
        // The first tick after the block stands for the latest deadline it passed.
        let afterTheBlock = try #require(all.dropFirst(before).first)
        #expect(afterTheBlock.missed > 0, "the tick after a 50 ms block missed \(afterTheBlock.missed) periods")
        #expect(all.allSatisfy { $0.fired >= $0.scheduled })
        #expect(engine.counters.late > lateBefore)
        #expect(engine.counters.missedPeriods >= UInt64(all.reduce(0) { $0 + $1.missed }))
    }

    /// A wall-clock step (here simulated through `clockChanged`) is counted and re-evaluates
    /// wall timers without firing one whose deadline is still ahead.
    @Test(.needsTheEngine("counts clock steps"), .timeLimit(.minutes(2)))
    func wallClockStepDoesNotFireEarly() throws {
        let engine = try TimerEngine()
        let fired = Counter()
        let timer = SafeDispatchTimer(backend: .engine(engine), clock: .wall)
        let deadline = TimerClock.wall.now().advanced(by: .seconds(1))
        #expect(timer.schedule(at: deadline) { _ in fired.increment() })
        let steps = engine.counters.clockSteps
        engine.clockChanged(.wall)
        // At least: a real step, which a test of the core makes, counts too.
        #expect(engine.counters.clockSteps >= steps + 1)
        // A wall timer due after the step has fired: the re-evaluation the step causes ran
        // before it, and a timer it wrongly found due would have fired by then.
        let probed = LockedCondition(false)
        let probe = SafeDispatchTimer(backend: .engine(engine), clock: .wall)
        #expect(
            probe.schedule(at: TimerClock.wall.now().advanced(by: .milliseconds(1))) { _ in probed.update { $0 = true }
            })
        #expect(probed.wait(timeout: .seconds(10)) { $0 })
        #expect(fired.count == 0, "a wall timer 1 s ahead fired after a clock step")
        #expect(engine.counters.armed == 1)
        #expect(timer.cancel())
        #expect(engine.counters.armed == 0)
    }

    /// `SCHED_FIFO` is granted or its refusal reported; the engine runs either way.
    ///
    /// Checking the refusal path as root would need dropping `CAP_SYS_NICE` from the creating
    /// thread (capabilities are per thread, and the firing thread inherits them), which takes
    /// the raw `capset` system call: variadic `syscall` is not callable from Swift, and libcap
    /// is not a dependency. That part is left out.
    @Test(.needsTheEngine("sets a firing thread's priority"), .timeLimit(.minutes(2)))
    func realtimePriorityIsGrantedOrRefusalReported() throws {
        let engine = try TimerEngine(configuration: .init(realtimePriority: 10))
        let report = engine.threadReport
        if let refusal = report.realtimeRefusal {
            #expect(report.realtimePriority == nil)
            #expect(refusal.code == EPERM || refusal.code == EINVAL || refusal.code == EAGAIN, "\(refusal)")
        } else {
            #expect(report.realtimePriority == 10)
        }
        let fired = DispatchSemaphore(value: 0)
        let timer = SafeDispatchTimer(backend: .engine(engine))
        #expect(timer.schedule(deadline: .now() + .milliseconds(1)) { _ in fired.signal() })
        #expect(fired.wait(timeout: .now() + 5) == .success)
        #expect(throws: TimerError.self) { try TimerEngine(configuration: .init(realtimePriority: 100)) }
    }
}

/// `RLIMIT_NOFILE`, the limit on open descriptors, as the type `getrlimit` takes on Glibc.
let openFilesLimit = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
