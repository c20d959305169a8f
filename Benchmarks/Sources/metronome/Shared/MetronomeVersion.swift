/// The version `metronome --version` prints and every JSON report carries.
enum MetronomeVersion {
    static let current = "0.2.0"
}
