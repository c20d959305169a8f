import Testing

@testable import MetronomeMeasurements

@Suite struct StabbingOptimumTests {
    @Test func noWindowsNeedNoPoints() {
        #expect(StabbingOptimum.minimumPoints([]) == 0)
        #expect(StabbingOptimum.points([]).isEmpty)
    }

    @Test func disjointWindowsNeedOnePointEach() {
        let windows: [ClosedRange<Int64>] = [30...39, 0...9, 10...19, 20...29]
        #expect(StabbingOptimum.minimumPoints(windows) == 4)
        #expect(StabbingOptimum.points(windows) == [9, 19, 29, 39])
    }

    @Test func nestedWindowsNeedOnePoint() {
        let windows: [ClosedRange<Int64>] = [0...100, 10...90, 20...80, 40...60, 50...50]
        #expect(StabbingOptimum.minimumPoints(windows) == 1)
        #expect(StabbingOptimum.points(windows) == [50])
    }

    @Test(arguments: 1...9)
    func chainOfPairwiseOverlapsNeedsHalf(count: Int) {
        // Window i overlaps only windows i-1 and i+1, at a shared endpoint.
        let windows = (0..<Int64(count)).map { (2 * $0)...(2 * $0 + 2) }
        #expect(StabbingOptimum.minimumPoints(windows) == (count + 1) / 2)
    }

    @Test func identicalPointsNeedOnePoint() {
        #expect(StabbingOptimum.minimumPoints(Array(repeating: 5...5, count: 10)) == 1)
    }

    @Test func distinctPointsNeedOneEach() {
        #expect(StabbingOptimum.minimumPoints([3...3, 1...1, 2...2, 1...1]) == 3)
    }

    @Test func matchesBruteForceOnRandomSmallSets() {
        var random = SplitMix64(seed: 42)
        for _ in 0..<500 {
            let count = Int(random.next(below: 8))
            let windows = (0..<count).map { _ -> ClosedRange<Int64> in
                let start = random.next(below: 20)
                return start...(start + random.next(below: 6))
            }
            let points = StabbingOptimum.points(windows)
            #expect(stabsAll(points, windows), "\(points) misses a window of \(windows)")
            #expect(points.count == bruteForceOptimum(windows), "windows \(windows)")
        }
    }

    private func stabsAll(_ points: [Int64], _ windows: [ClosedRange<Int64>]) -> Bool {
        windows.allSatisfy { window in points.contains { window.contains($0) } }
    }

    /// Tries every subset of right endpoints, smallest first: some optimum uses only right
    /// endpoints, because moving a point right to the nearest right endpoint loses no window.
    private func bruteForceOptimum(_ windows: [ClosedRange<Int64>]) -> Int {
        let candidates = Array(Set(windows.map(\.upperBound)))
        var best = candidates.count
        for mask in 0..<(1 << candidates.count) {
            let subset = candidates.indices.filter { mask & (1 << $0) != 0 }.map { candidates[$0] }
            if subset.count < best, stabsAll(subset, windows) {
                best = subset.count
            }
        }
        return best
    }
}
