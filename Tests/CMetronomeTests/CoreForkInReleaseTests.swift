#if Engine
// A fork inside a context release that a stop runs: the child's copy of the stopping thread
// goes on with the stop, and the engine it holds must outlive that stop there, to be freed by
// the destroy that follows, not by the stop.
import CMetronome
import Glibc
import Synchronization
import Testing

extension CoreContractTests {
    @Suite(
        .serialized, .tags(.realTime),
        .disabled(if: Bounds.threadSanitized, "TSan does not support threads after a multi-threaded fork"))
    struct ForkInRelease {
        /// Exit codes of the grandchild.
        static let freedByTheStop = Int32(20)
        static let keptByTheDestroy = Int32(21)

        /// In a forked child, where the stop drops the inherited timers on the stopping thread
        /// itself, a release forks again. In that grandchild the stop returns with the engine
        /// alive (its descriptors still open), and the destroy after it frees it (they are
        /// closed). A hold count one short frees the engine in the stop, and the destroy then
        /// reads freed memory.
        @Test(arguments: [UInt32(1), 2])
        func aForkInAReleaseOfAStopKeepsTheEngineForItsDestroy(shards: UInt32) throws {
            let engine = try Engine(shards: shards)
            let probes = try engine.makeTimers(2)
            let parent = getpid()
            let child = Atomic<Int32>(0)
            let grandchild = Atomic<Int32>(0)
            let inGrandchild = Atomic<Bool>(false)
            probes[0].onRelease = { _ in
                guard getpid() != parent, child.load(ordering: .relaxed) == getpid() else { return }
                let pid = fork()
                if pid == 0 {
                    inGrandchild.store(true, ordering: .relaxed)
                } else {
                    grandchild.store(pid, ordering: .relaxed)
                }
            }
            try #require(probes[1].armOnce(at: Time.monotonic() + 60 * Time.s) == 0)
            let code = exitCodeOfChild {
                child.store(getpid(), ordering: .relaxed)
                let open = FiringThread.openDescriptors()
                mtr_engine_stop(engine.handle)
                if inGrandchild.load(ordering: .relaxed) {
                    // Back from the release that forked it.
                    guard FiringThread.openDescriptors() == open else { _exit(Self.freedByTheStop) }
                    mtr_engine_destroy(engine.handle)
                    _exit(FiringThread.openDescriptors() < open ? 0 : Self.keptByTheDestroy)
                }
                var status: Int32 = 0
                let pid = grandchild.load(ordering: .relaxed)
                guard pid > 0, waitpid(pid, &status, 0) == pid, status & 0x7f == 0 else { return 2 }
                return (status >> 8) & 0xff
            }
            #expect(code == 0)
            engine.destroyAndExpectAllReleasedOnce()
        }
    }
}
#endif
