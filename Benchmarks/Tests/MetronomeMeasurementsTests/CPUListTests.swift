import Glibc
import Testing

@testable import MetronomeMeasurements

@Suite struct CPUListTests {
    @Test(arguments: [("0", [0]), ("0,2-4", [0, 2, 3, 4]), ("3,1", [3, 1]), ("5-5", [5]), ("1023", [1023])])
    func parsesTheKernelsListSyntaxInTheOrderGiven(text: String, cpus: [Int]) {
        #expect(CPUList(text)?.cpus == cpus)
    }

    @Test(arguments: ["", ",", "0,", "-1", "1-0", "a", "0-", "1024", "0-99999999999", " 1", "1:2"])
    func refusesAnythingElse(text: String) {
        #expect(CPUList(text) == nil)
    }

    @Test(arguments: [([0, 1, 2, 5], "0-2,5"), ([3, 1], "3,1"), ([7], "7"), ([0, 2, 3], "0,2-3")])
    func describesItselfInTheShortestForm(cpus: [Int], text: String) {
        #expect(CPUList(cpus).description == text)
        #expect(CPUList(text)?.cpus == cpus)
    }

    @Test func theAllowedCPUsAreAscendingAndIncludeTheOnesInUse() throws {
        let allowed = try #require(CPUList.allowed)
        #expect(!allowed.cpus.isEmpty)
        #expect(allowed.cpus == allowed.cpus.sorted())
        #expect(allowed.cpus.count <= sysconf(Int32(_SC_NPROCESSORS_ONLN)))
    }
}
