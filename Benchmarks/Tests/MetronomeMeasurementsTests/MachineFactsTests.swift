import Foundation
import Testing

@testable import MetronomeMeasurements

@Suite struct MachineFactsTests {
    @Test func currentFactsAreSane() {
        let facts = MachineFacts.current()
        #expect(facts.cpuCount >= 1)
        #expect(!facts.kernelRelease.isEmpty)
        #expect(facts.kernelRelease.first?.isNumber == true)
        // The kernel never reports a zero slack for a normal thread; the default is 50 µs.
        #expect(facts.timerSlackNanoseconds > 0)
        #expect(!facts.clocksource.isEmpty)
        #expect(!facts.cpufreqGovernor.isEmpty)
        #expect(facts.schedFIFOPermitted == (facts.schedFIFOReason == "permitted"))
        if let runtime = facts.schedRTRuntimeMicroseconds {
            #expect(runtime >= -1)
        }
        #expect(facts.summaryLines.count == 3)
        #expect(facts.summaryLines[0].contains(facts.kernelRelease))
    }

    @Test func probingSchedFIFOLeavesTheCallerAlone() {
        var policyBefore: Int32 = 0
        var parameters = sched_param()
        pthread_getschedparam(pthread_self(), &policyBefore, &parameters)
        _ = MachineFacts.current()
        var policyAfter: Int32 = 0
        pthread_getschedparam(pthread_self(), &policyAfter, &parameters)
        #expect(policyAfter == policyBefore)
    }

    @Test func roundTripsThroughJSON() throws {
        let facts = MachineFacts.current()
        let decoded = try JSONDecoder().decode(MachineFacts.self, from: try JSONEncoder().encode(facts))
        #expect(decoded == facts)
    }
}
