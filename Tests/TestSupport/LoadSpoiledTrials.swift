import Testing

/// The trials of a timing-dependent test that the machine's load spoiled (a thread held past
/// a deadline the trial needed to come first), counted rather than silently given up on.
///
/// A spoiled trial proves nothing either way, so it is retried, and left out: ``report()``
/// prints how many were spoiled, so a run says how much of it tested anything. Load is not a
/// failure, so a run whose every trial was spoiled passes, saying it tested nothing; what
/// such a test would measure of the machine's timing belongs in a benchmark. A test fails
/// only on what its counted trials show.
public struct LoadSpoiledTrials {
    private let test: String
    private let sourceLocation: SourceLocation
    public private(set) var counted = 0
    private var reasons: [String] = []

    public init(_ test: String = #function, sourceLocation: SourceLocation = #_sourceLocation) {
        self.test = test
        self.sourceLocation = sourceLocation
    }

    /// Records a trial that tested what it was made for.
    public mutating func count() {
        self.counted += 1
    }

    /// Records a trial the load spoiled, and why.
    public mutating func spoil(_ reason: String) {
        self.reasons.append(reason)
    }

    /// The spoiled trials, if any, and what is left of the test: what ``report()`` prints.
    public var summary: String? {
        guard let first = self.reasons.first else { return nil }
        let total = self.counted + self.reasons.count
        let left = self.counted == 0 ? "so it tested nothing here" : "leaving \(self.counted) counted"
        return "\(self.test): the load spoiled \(self.reasons.count) of \(total) trials, \(left) (first: \(first))"
    }

    /// Prints the spoiled trials, if any. Never a failure: see the type's discussion.
    public func report() {
        if let summary = self.summary { print("\(summary) [\(self.sourceLocation)]") }
    }
}

/// What one trial of ``retryingSpoiledTrials(upTo:_:sourceLocation:_:)`` came to.
public enum TrialOutcome {
    case counted
    case spoiled(String)
}

/// Runs `trial` until one counts, at most `attempts` times, and reports the spoiled ones
/// through ``LoadSpoiledTrials``.
public func retryingSpoiledTrials(
    upTo attempts: Int, _ test: String = #function, sourceLocation: SourceLocation = #_sourceLocation,
    _ trial: () throws -> TrialOutcome
) rethrows {
    var trials = LoadSpoiledTrials(test, sourceLocation: sourceLocation)
    for _ in 0..<attempts where trials.counted == 0 {
        switch try trial() {
        case .counted: trials.count()
        case .spoiled(let reason): trials.spoil(reason)
        }
    }
    trials.report()
}
