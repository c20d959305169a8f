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
            let busyBefore = try #require(ProcessCPUTime.threadNanoseconds(busy[0]))
            // Spinning, not sleeping, until the busy thread has had 20 ms of CPU: on a loaded
            // machine a fixed wait may give it less.
            Self.spin { (ProcessCPUTime.threadNanoseconds(busy[0]) ?? busyBefore) - busyBefore >= 20_000_000 }
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
            let body = KernelThread.currentID()
            let bodyBefore = try #require(ProcessCPUTime.threadNanoseconds(body))
            let (value, cost) = try RunCost.measure(load: 1) { () -> Int in
                // Until the body has had 30 ms of CPU, not for a fixed time: the load thread,
                // as runnable as the body, has by then had about as much, however loaded the
                // machine.
                Self.spin { (ProcessCPUTime.threadNanoseconds(body) ?? bodyBefore) - bodyBefore >= 30_000_000 }
                return 7
            }
            let process = ProcessCPUTime.nanoseconds() - processBefore
            #expect(value == 7)
            #expect(cost.elapsedNanoseconds >= 30_000_000)
            #expect(cost.cpuNanoseconds >= 10_000_000)
            // The load thread spun beside the body: its time is in the process's total and not
            // in the cost. (Other threads of the test process count in both, so comparing the
            // cost with the elapsed time instead would depend on what else runs.)
            #expect(process - cost.cpuNanoseconds >= 10_000_000, "load charged: \(process) vs \(cost.cpuNanoseconds)")
            #expect(cost.perSecond(100) > 0)
            #expect(cost.cpuMillisecondsPer1k(firings: 0) == 0)
        }

        /// Spins until `done`, for at most ten seconds.
        static func spin(until done: () -> Bool) {
            let giveUp = MonotonicTime.now() + 10_000_000_000
            while !done(), MonotonicTime.now() < giveUp {
                MonotonicTime.spin(nanoseconds: 1_000_000)
            }
        }
    }
}
