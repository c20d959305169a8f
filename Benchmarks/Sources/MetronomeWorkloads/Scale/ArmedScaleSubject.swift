/// A backend of `metronome scale`'s armed-count table.
public protocol ArmedScaleSubject {
    /// The name its rows start with.
    var name: String { get }

    /// Measures add+cancel pairs at each of `config.armed` timers armed beside them, with
    /// `config.armedOperations` pairs per run and each run stopped at `config.timeLimitNanoseconds`.
    func run(_ config: ScaleConfiguration) throws -> [ArmedScaleResult]
}
