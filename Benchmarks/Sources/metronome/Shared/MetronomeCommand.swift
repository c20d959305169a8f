import ArgumentParser

/// `metronome`: measures timer precision on this machine, Metronome's engine and GCD side
/// by side in one run.
///
/// Without a subcommand it prints help: a run takes tens of seconds and loads the machine,
/// so it starts only when asked for (`make jitter` asks for `metronome jitter`).
@main
struct MetronomeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "metronome",
        abstract: "Timer precision, coalescing, scale and stress: Metronome's engine versus GCD.",
        version: MetronomeVersion.current,
        subcommands: [JitterCommand.self, CoalesceCommand.self, ScaleCommand.self, StressCommand.self]
    )

    /// More arguments than any run needs are refused before parsing: the parser's time
    /// grows with the square of their count (4,000 took 8 s here).
    static let mostArguments = 512

    static func main() {
        let count = CommandLine.arguments.count - 1
        guard count <= Self.mostArguments else {
            Self.exit(withError: ValidationError("at most \(Self.mostArguments) arguments (got \(count))"))
        }
        Self.main(nil)
    }

    func run() throws {
        print(Self.helpMessage())
    }
}
