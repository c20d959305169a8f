import Dispatch
import Foundation
import Glibc
import MetronomeMeasurements
import MetronomeTestSupport
import Synchronization
import Testing

@Suite struct KernelThreadTests {
    /// Each thread's entry names it, running or asleep: the calling thread runs, and a thread
    /// blocked on a semaphore sleeps.
    @Test(.timeLimit(.minutes(1)))
    func statesNameEachThreadRunningOrAsleep() throws {
        let sleeper = Atomic<Int32>(0)
        let wake = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            sleeper.store(KernelThread.currentID(), ordering: .releasing)
            wake.wait()
            done.signal()
        }
        defer {
            wake.signal()
            done.wait()
        }
        while sleeper.load(ordering: .acquiring) == 0 { sched_yield() }
        let tid = sleeper.load(ordering: .acquiring)
        let entry = { (tid: Int32) in
            KernelThread.states(ofProcess: getpid()).split(separator: ", ").first { $0.hasPrefix("\(tid) ") }
        }
        #expect(entry(KernelThread.currentID())?.split(separator: " ").dropFirst().first == "R")
        // Asleep once it has reached the semaphore's wait.
        var state: Substring?
        for _ in 0..<1_000 {
            state = entry(tid)?.split(separator: " ").dropFirst().first
            if state == "S" { break }
            usleep(1_000)
        }
        #expect(state == "S")
        #expect(KernelThread.states(ofProcess: Int32.max).isEmpty)
    }
}
