/// A backend measured by `metronome scale`.
public protocol ScaleSubject {
    /// The row name.
    var name: String { get }

    /// Measures the backend with the run's settings; each subject seeds its own generator
    /// from `config.seed`.
    func run(_ config: ScaleConfiguration) throws -> ScaleResult
}
