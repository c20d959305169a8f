import ArgumentParser
import Foundation

/// The `--hgrm` files, created before anything is measured: a path that cannot be written
/// must fail in a second, not after a run whose results it would then lose.
enum HistogramFiles {
    /// Creates `directory` if needed and opens, truncating, `<directory>/<name>.hgrm` for
    /// every name; on failure exits as `command` refuses a bad option (status 64 and its
    /// usage), naming `--hgrm`, the path and the system's reason. The subjects' names are
    /// known only once `run` starts, after `validate`.
    static func prepare<Command: ParsableCommand>(directory: String, names: [String], for command: Command.Type) {
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            self.refuse("--hgrm: cannot create directory '\(directory)'", as: command)
        }
        for name in names {
            let path = "\(directory)/\(name).hgrm"
            guard let file = fopen(path, "w") else {
                self.refuse("--hgrm: cannot write '\(path)': \(String(cString: strerror(errno)))", as: command)
            }
            fclose(file)
        }
    }

    /// Ends the process as the parser ends it for an option `validate` refuses: the message,
    /// the subcommand's usage under the tool's name, and status 64. (The parser's own exit,
    /// called from `run`, names the subcommand without the tool.)
    private static func refuse<Command: ParsableCommand>(_ message: String, as command: Command.Type) -> Never {
        let name = command.configuration.commandName ?? "\(command)"
        FileHandle.standardError.write(
            Data(
                """
                Error: \(message)
                Usage: \(MetronomeCommand.usageString(for: command))
                  See 'metronome \(name) --help' for more information.

                """.utf8))
        command.exit(withError: ExitCode.validationFailure)
    }
}
