import ArgumentParser

/// A length of time given on the command line as cyclictest takes it: a number with an
/// optional unit, `500ms`, `1m`, `90s`, `2h`, `250us`; a bare number is in seconds.
struct TimeSpan: ExpressibleByArgument, Sendable, Equatable, CustomStringConvertible {
    /// The length in seconds; may be anything a `Double` holds until `validate()` checks it.
    var seconds: Double

    private static let unitSeconds: [(suffix: String, seconds: Double)] = [
        ("ns", 1e-9), ("us", 1e-6), ("µs", 1e-6), ("ms", 1e-3), ("s", 1), ("m", 60), ("h", 3600), ("d", 86_400),
    ]

    init(seconds: Double) {
        self.seconds = seconds
    }

    init?(argument: String) {
        // Longest suffix first, so "ms" is not read as "m" after a number ending in "s".
        let unit = Self.unitSeconds.sorted { $0.suffix.count > $1.suffix.count }.first { argument.hasSuffix($0.suffix) }
        let number = unit.map { String(argument.dropLast($0.suffix.count)) } ?? argument
        guard let value = Double(number) else { return nil }
        self.seconds = value * (unit?.seconds ?? 1)
    }

    var description: String { "\(self.seconds) s" }

    static var defaultCompletionKind: CompletionKind { .default }
}
