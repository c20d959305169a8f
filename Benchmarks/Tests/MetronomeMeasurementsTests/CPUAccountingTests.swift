import MetronomeTestSupport
import Testing

@testable import MetronomeMeasurements

extension RealTime {
    @Suite struct CPUAccountingTests {
        @Test(.timeLimit(.minutes(1)))
        func excludingABusyThreadLeavesItsTimeOut() throws {
            let load = BusyLoad()
            try load.start(threads: 1)
            defer { load.stop() }
            let busy = load.threadIDs
            #expect(busy.count == 1)
            let includingBefore = ProcessCPUTime.nanoseconds()
            let excludingBefore = ProcessCPUTime.nanoseconds(excluding: busy)
            // Spinning, not sleeping: the busy thread must accumulate CPU time while we wait.
            MonotonicTime.spin(nanoseconds: 100_000_000)
            let including = ProcessCPUTime.nanoseconds() - includingBefore
            let excluding = ProcessCPUTime.nanoseconds(excluding: busy) - excludingBefore
            #expect(excluding < including)
            #expect(including - excluding >= 10_000_000, "the busy thread got \(including - excluding) ns")
            #expect(try #require(ProcessCPUTime.threadNanoseconds(busy[0])) > 0)
        }

        @Test(.timeLimit(.minutes(1)))
        func busyLoadStartsAndStopsItsThreads() throws {
            let load = BusyLoad()
            try load.start(threads: 2)
            let threads = load.threadIDs
            #expect(threads.count == 2)
            #expect(Set(threads).count == 2)
            #expect(!threads.contains(KernelThread.currentID()))
            load.stop()
            #expect(load.threadIDs.isEmpty)
            #expect(threads.allSatisfy { ProcessCPUTime.threadNanoseconds($0) == nil })
            load.stop()
        }

        @Test(.timeLimit(.minutes(1)))
        func blockingCountsAsAVoluntaryWakeup() {
            let before = VoluntaryWakeups.count()
            let never = LockedCondition(false)
            #expect(!never.wait(timeout: .milliseconds(10)) { $0 })
            #expect(VoluntaryWakeups.count() > before)
        }

        @Test(.timeLimit(.minutes(1)))
        func runCostChargesTheBodyNotTheLoad() throws {
            let processBefore = ProcessCPUTime.nanoseconds()
            let (value, cost) = try RunCost.measure(load: 1) { () -> Int in
                MonotonicTime.spin(nanoseconds: 50_000_000)
                return 7
            }
            let process = ProcessCPUTime.nanoseconds() - processBefore
            #expect(value == 7)
            #expect(cost.elapsedNanoseconds >= 50_000_000)
            #expect(cost.cpuNanoseconds >= 10_000_000)
            // The load thread spun beside the body: its time is in the process's total and not
            // in the cost. (Other threads of the test process count in both, so comparing the
            // cost with the elapsed time instead would depend on what else runs.)
            #expect(process - cost.cpuNanoseconds >= 10_000_000, "load charged: \(process) vs \(cost.cpuNanoseconds)")
            #expect(cost.perSecond(100) > 0)
            #expect(cost.cpuMillisecondsPer1k(firings: 0) == 0)
        }
    }
}
