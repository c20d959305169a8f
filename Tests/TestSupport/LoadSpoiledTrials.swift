import Testing

/// The trials of a timing-dependent test that the machine's load spoiled (a thread held past
/// a deadline the trial needed to come first), counted rather than silently given up on.
///
/// A spoiled trial proves nothing either way, so it is retried; ``report(needing:)`` prints
/// how many were spoiled, so a run says how much of it tested anything, and fails the test
/// when too few counted: a machine that spoils every trial must not pass a test that never ran.
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

    /// Prints the spoiled trials, if any, and records an issue when fewer than `needed`
    /// trials counted.
    public func report(needing needed: Int = 1) {
        let total = self.counted + self.reasons.count
        if !self.reasons.isEmpty {
            print("\(self.test): the load spoiled \(self.reasons.count) of \(total) trials (first: \(self.reasons[0]))")
        }
        if self.counted < needed {
            Issue.record(
                "the load spoiled \(self.reasons.count) of \(total) trials, leaving \(self.counted) of the \(needed) needed",
                sourceLocation: self.sourceLocation)
        }
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
