import Foundation

/// The JSON envelope of every `metronome` command's output.
///
/// ```json
/// {"tool": "metronome", "command": "jitter", "config": {…}, "machine": {…},
///  "results": [{"backend": "engine", …}, …], "notes": ["…"]}
/// ```
///
/// Keys are a stable schema other tools read. ``jsonString()`` sorts keys and pretty-prints.
///
/// ```swift
/// let report = Report(command: "jitter", config: config, machine: .current(),
///                     results: results, notes: JitterRunner.notes(config: config, load: 0, results: results))
/// print(try report.jsonString())
/// ```
public struct Report<Configuration: Codable & Sendable, Result: Codable & Sendable>: Codable, Sendable {
    /// Always `"metronome"`.
    public var tool: String
    /// The subcommand: `"jitter"`, `"coalesce"`, `"scale"` or `"stress"`.
    public var command: String
    /// The settings every backend ran with.
    public var config: Configuration
    /// The machine the run was made on.
    public var machine: MachineFacts
    /// One row per backend, in the order they ran.
    public var results: [Result]
    /// Remarks a reader needs to interpret the results; may be empty.
    public var notes: [String]

    /// Creates a report.
    public init(command: String, config: Configuration, machine: MachineFacts, results: [Result], notes: [String] = [])
    {
        self.tool = "metronome"
        self.command = command
        self.config = config
        self.machine = machine
        self.results = results
        self.notes = notes
    }

    /// Decodes a report; a missing `notes` key decodes as no notes.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.tool = try container.decode(String.self, forKey: .tool)
        self.command = try container.decode(String.self, forKey: .command)
        self.config = try container.decode(Configuration.self, forKey: .config)
        self.machine = try container.decode(MachineFacts.self, forKey: .machine)
        self.results = try container.decode([Result].self, forKey: .results)
        // Older reports and other producers may leave notes out.
        self.notes = try container.decodeIfPresent([String].self, forKey: .notes) ?? []
    }

    /// The report as pretty-printed JSON with sorted keys, for files and diffs.
    ///
    /// - Throws: `EncodingError` if a value cannot be encoded (a NaN or infinite number).
    public func jsonString() throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(self), as: UTF8.self)
    }
}

extension Report: Equatable where Configuration: Equatable, Result: Equatable {}
