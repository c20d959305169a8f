import Glibc
import Metronome
import MetronomeTestSupport
import Testing

/// `TimerEngine.shared` is the process's: sharded for many threads, and never shut down by
/// anyone, so that one library cannot stop the timers of all the others.
@Suite(.serialized)
struct SharedEngineTests {
    /// On a machine of several CPUs the shared engine has several shards, and never more
    /// than there are CPUs to arm from at once.
    @Test func sharedIsShardedPerCPU() {
        let online = Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))
        let shards = TimerEngine.shared.configuration.shards
        #expect(TimerEngine.shared.configuration == TimerEngine.sharedConfiguration)
        #expect(shards >= 1 && shards <= max(online, 1), "\(shards) shards for \(online) CPUs")
        if online > 1 { #expect(shards > 1, "one shard on a machine of \(online) CPUs") }
    }

    @Test(.timeLimit(.minutes(1)))
    func theBlockingShutdownLeavesSharedRunning() {
        TimerEngine.shared.syncShutdown()
        #expect(Self.sharedFires())
    }

    @Test(.timeLimit(.minutes(1)))
    func theAsyncShutdownLeavesSharedRunning() async {
        await TimerEngine.shared.shutdown()
        #expect(Self.sharedFires())
    }

    /// An engine of one's own stops with either form.
    @Test(.timeLimit(.minutes(1)))
    func theAsyncShutdownStopsAnEngineOfOnesOwn() async throws {
        let engine = try TimerEngine()
        let timer = SafeDispatchTimer(backend: .engine(engine))
        #expect(timer.schedule(after: .seconds(3_600)) { _ in })
        await engine.shutdown()
        #expect(timer.state == .cancelled)
        #expect(!SafeDispatchTimer(backend: .engine(engine)).schedule(after: .seconds(1)) { _ in })
    }

    /// A one-shot on the shared engine fires (waited for with a generous timeout).
    private static func sharedFires() -> Bool {
        let fired = LockedCondition(false)
        let timer = SafeDispatchTimer()
        guard timer.schedule(after: .milliseconds(1), handler: { _ in fired.update { $0 = true } }) else {
            return false
        }
        return fired.wait(timeout: .seconds(30)) { $0 }
    }
}
