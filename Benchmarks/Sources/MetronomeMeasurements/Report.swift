import Foundation

/// The JSON envelope of every `metronome` command's output.
///
/// ```json
/// {"schema_version": 1, "tool": "metronome", "tool_version": "0.2.0", "command": "jitter",
///  "command_line": ["metronome", "jitter"], "started_at": "2025-…Z", "ended_at": "2025-…Z",
///  "config": {…}, "machine": {…}, "results": [{"backend": "engine", …}, …], "notes": ["…"]}
/// ```
///
/// Keys are a stable schema other tools read, described per command by the JSON Schemas in
/// `Benchmarks/Schemas/`; ``schemaVersion`` changes when a key changes meaning or goes away.
/// ``jsonString()`` sorts keys and pretty-prints; times are ISO 8601 in UTC.
///
/// ```swift
/// let report = Report(command: "jitter", invocation: invocation, config: config, machine: .current(),
///                     results: results, notes: JitterRunner.notes(config: config, load: 0, results: results))
/// print(try report.jsonString())
/// ```
public struct Report<Configuration: Codable & Sendable, Result: Codable & Sendable>: Codable, Sendable {
    /// The version of this envelope's schema.
    public static var currentSchemaVersion: Int { 1 }

    /// ``currentSchemaVersion`` when written by this build.
    public var schemaVersion: Int
    /// Always `"metronome"`.
    public var tool: String
    /// The tool's version, its command line, and when it measured.
    public var invocation: Invocation
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
    public init(
        command: String,
        invocation: Invocation,
        config: Configuration,
        machine: MachineFacts,
        results: [Result],
        notes: [String] = []
    ) {
        self.schemaVersion = Self.currentSchemaVersion
        self.tool = "metronome"
        self.invocation = invocation
        self.command = command
        self.config = config
        self.machine = machine
        self.results = results
        self.notes = notes
    }

    /// Decodes a report; a missing `notes` key decodes as no notes.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.schemaVersion = try container.decode(Int.self, forKey: .schemaVersion)
        self.tool = try container.decode(String.self, forKey: .tool)
        self.invocation = try Invocation(from: decoder)
        self.command = try container.decode(String.self, forKey: .command)
        self.config = try container.decode(Configuration.self, forKey: .config)
        self.machine = try container.decode(MachineFacts.self, forKey: .machine)
        self.results = try container.decode([Result].self, forKey: .results)
        // Older reports and other producers may leave notes out.
        self.notes = try container.decodeIfPresent([String].self, forKey: .notes) ?? []
    }

    enum CodingKeys: String, CodingKey {
        case schemaVersion = "schema_version"
        case tool, command, config, machine, results, notes
    }

    // One flat object: the invocation's keys sit beside the envelope's.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(self.schemaVersion, forKey: .schemaVersion)
        try container.encode(self.tool, forKey: .tool)
        try self.invocation.encode(to: encoder)
        try container.encode(self.command, forKey: .command)
        try container.encode(self.config, forKey: .config)
        try container.encode(self.machine, forKey: .machine)
        try container.encode(self.results, forKey: .results)
        try container.encode(self.notes, forKey: .notes)
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
