import MetronomeTestSupport
import Testing

/// Load is not a failure: a trial the machine's load spoiled is reported and left out.
@Suite
struct LoadSpoiledTrialsTests {
    /// A run whose every trial the load spoiled passes, and says it tested nothing.
    @Test
    func aRunTheLoadSpoiledEntirelyPasses() {
        var trials = LoadSpoiledTrials()
        trials.spoil("the machine stalled")
        trials.spoil("the machine stalled again")
        trials.report()
        #expect(trials.counted == 0)
    }

    /// Trials the load spoiled beside counted ones are left out of the count.
    @Test
    func spoiledTrialsAreLeftOutOfTheCount() {
        var attempts = 0
        retryingSpoiledTrials(upTo: 5) {
            attempts += 1
            return attempts < 3 ? .spoiled("stalled") : .counted
        }
        #expect(attempts == 3)
        var everySpoiled = 0
        retryingSpoiledTrials(upTo: 4) {
            everySpoiled += 1
            return .spoiled("stalled")
        }
        #expect(everySpoiled == 4)
    }
}
