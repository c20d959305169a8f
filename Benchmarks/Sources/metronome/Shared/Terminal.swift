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

    static func printHeader(_ machine: MachineFacts, config: String) {
        machine.summaryLines.forEach { print($0) }
        print(config)
        print()
    }
}
