import ArgumentParser

/// `metronome`: measures timer precision on this machine, Metronome's engine and GCD side
/// by side in one run.
@main
struct MetronomeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "metronome",
        abstract: "Timer precision, coalescing, scale and stress: Metronome's engine versus GCD.",
        subcommands: [JitterCommand.self, CoalesceCommand.self, ScaleCommand.self, StressCommand.self],
        defaultSubcommand: JitterCommand.self
    )
}
