import Glibc
import MetronomeMeasurements

/// What the CLI prints around its tables.
enum Terminal {
    /// Progress lines on standard error, only when it is a terminal and no JSON is asked for.
    static func progress(quiet: Bool) -> ((String) -> Void)? {
        guard !quiet, isatty(STDERR_FILENO) != 0 else { return nil }
        return { line in
            let text = line + "\n"
            _ = text.withCString { write(STDERR_FILENO, $0, strlen($0)) }
        }
    }

    /// Prints a finished run: its report as JSON, or the machine, a line of the run's
    /// settings, the tables and the report's notes.
    static func show<Configuration, Result>(
        _ report: Report<Configuration, Result>, json: Bool, settings: @autoclosure () -> String,
        tables: @autoclosure () -> [String]
    ) throws {
        guard !json else {
            print(try report.jsonString())
            return
        }
        report.machine.summaryLines.forEach { print($0) }
        print(settings())
        print()
        tables().forEach { print($0) }
        report.notes.forEach { print("note: \($0)") }
    }
}
