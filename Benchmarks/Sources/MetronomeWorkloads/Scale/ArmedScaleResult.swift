/// A row of `metronome scale`'s armed-count table: add+cancel pairs while `armed` timers
/// stay armed beside them, for backends whose cost may grow with that count; JSON keys are
/// part of the stable schema.
public struct ArmedScaleResult: Codable, Sendable, Equatable {
    public var backend: String
    /// Timers (or sleeping tasks) left armed while the pairs ran.
    public var armed: Int
    /// Pairs each run was asked for.
    public var pairs: Int
    /// Whether each pair makes a timer of its own or rearms one made before the runs.
    public var perPair: PerPair
    /// Whether every run did its pairs within the time limit.
    public var finished: Bool
    /// Pairs done by the run the time limit stopped, or ``pairs`` when every run finished.
    public var pairsDone: Int
    /// Pairs per second, the best of ``ScaleProbe/repeats`` runs; absent when a run did not
    /// finish.
    public var addCancelPerSecond: Double?
    /// Resident memory growth from arming the ``armed`` timers, per timer.
    public var bytesPerTimer: Double

    enum CodingKeys: String, CodingKey {
        case backend, armed, pairs, finished
        case perPair = "per_pair"
        case pairsDone = "pairs_done"
        case addCancelPerSecond = "add_cancel_per_s"
        case bytesPerTimer = "bytes_per_timer"
    }

    init(
        backend: String, armed: Int, pairs: Int, perPair: PerPair, rate: ScaleProbe.LimitedRate, bytesPerTimer: Double
    ) {
        self.backend = backend
        self.armed = armed
        self.pairs = pairs
        self.perPair = perPair
        self.finished = rate.perSecond != nil
        self.pairsDone = rate.done
        self.addCancelPerSecond = rate.perSecond
        self.bytesPerTimer = bytesPerTimer
    }
}

/// What an add+cancel pair of the armed-count table costs in objects: a timer (or task)
/// made and dropped per pair, or one made before the runs and rearmed by each.
public enum PerPair: String, Codable, Sendable {
    case allocates
    case reuses
}
