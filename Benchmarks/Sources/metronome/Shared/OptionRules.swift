import ArgumentParser
import Glibc

/// The range checks every command runs in `validate()`, before anything is measured.
///
/// A `ValidationError` from `validate()` makes argument-parser exit with code 64 and print
/// the subcommand's usage, so every message names the option and its allowed range. The
/// ranges are also what keeps each conversion to nanoseconds and each allocation finite.
enum OptionRules {
    /// Busy threads per online CPU allowed for `--load`: more only starves the measuring
    /// thread, and 1,000 threads on 2 CPUs left a 200-sample run silent for minutes.
    static let loadThreadsPerCPU = 8

    /// The longest run a command accepts, in seconds: a day.
    static let longestRunSeconds = 86_400.0

    /// The online CPU count, at least 1.
    static var cpuCount: Int { max(sysconf(Int32(_SC_NPROCESSORS_ONLN)), 1) }

    static func check(_ value: Double, _ option: String, in range: ClosedRange<Double>, unit: String) throws {
        guard value.isFinite, range.contains(value) else {
            throw ValidationError(
                "\(option) must be between \(text(range.lowerBound)) and \(text(range.upperBound)) \(unit) (got \(value))"
            )
        }
    }

    /// For values that must be above `lowerBound`, not equal to it (a period, a duration).
    static func check(
        _ value: Double, _ option: String, above lowerBound: Double, upTo upperBound: Double, unit: String
    )
        throws
    {
        guard value.isFinite, value > lowerBound, value <= upperBound else {
            throw ValidationError(
                "\(option) must be above \(text(lowerBound)) and at most \(text(upperBound)) \(unit) (got \(value))")
        }
    }

    static func check(_ value: Int, _ option: String, in range: ClosedRange<Int>) throws {
        guard range.contains(value) else {
            throw ValidationError(
                "\(option) must be between \(range.lowerBound) and \(range.upperBound) (got \(value))")
        }
    }

    static func checkLoad(_ load: Int, _ option: String = "--load") throws {
        let most = self.loadThreadsPerCPU * self.cpuCount
        guard (0...most).contains(load) else {
            throw ValidationError(
                "\(option) must be between 0 and \(most) busy threads (\(self.loadThreadsPerCPU) per CPU) (got \(load))"
            )
        }
    }

    /// A comma-separated list of names, each one of `known`, none twice, at least one.
    static func names(_ list: String, _ option: String, known: [String]) throws -> [String] {
        let names = list.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        for name in names where !known.contains(name) {
            throw ValidationError("\(option): unknown name '\(name)'; use \(known.joined(separator: ", "))")
        }
        guard Set(names).count == names.count else { throw ValidationError("\(option) names a backend twice") }
        return names
    }

    private static func text(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : "\(value)"
    }
}

/// Checked conversions of validated option values to the integers the measurements use.
enum OptionConversion {
    /// `value` units of `nanosecondsPerUnit` each, in whole nanoseconds, saturating at
    /// `Int64`'s bounds (0 for NaN) instead of trapping; `validate()` keeps values far inside.
    static func nanoseconds(_ value: Double, nanosecondsPerUnit: Double) -> Int64 {
        let scaled = (value * nanosecondsPerUnit).rounded()
        if let exact = Int64(exactly: scaled) { return exact }
        if scaled.isNaN { return 0 }
        return scaled > 0 ? .max : .min
    }
}
