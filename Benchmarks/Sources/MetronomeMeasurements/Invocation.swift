import Foundation

/// Which tool run produced a report, and when: what a result file needs to stand on its own.
public struct Invocation: Codable, Sendable, Equatable {
    /// The version of the tool that measured.
    public var toolVersion: String
    /// The arguments the tool was started with, its own path first.
    public var commandLine: [String]
    /// When measuring began, UTC.
    public var startedAt: Date
    /// When measuring ended, UTC.
    public var endedAt: Date

    enum CodingKeys: String, CodingKey {
        case toolVersion = "tool_version"
        case commandLine = "command_line"
        case startedAt = "started_at"
        case endedAt = "ended_at"
    }

    /// Creates an invocation from its fields.
    public init(toolVersion: String, commandLine: [String], startedAt: Date, endedAt: Date) {
        self.toolVersion = toolVersion
        self.commandLine = commandLine
        self.startedAt = startedAt
        self.endedAt = endedAt
    }

    // ISO 8601 text whatever the coder's date strategy, so any JSON reader gets UTC times.
    private static let format = Date.ISO8601FormatStyle(includingFractionalSeconds: true)

    /// Decodes an invocation whose times are ISO 8601 text.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.toolVersion = try container.decode(String.self, forKey: .toolVersion)
        self.commandLine = try container.decode([String].self, forKey: .commandLine)
        self.startedAt = try Self.format.parse(try container.decode(String.self, forKey: .startedAt))
        self.endedAt = try Self.format.parse(try container.decode(String.self, forKey: .endedAt))
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(self.toolVersion, forKey: .toolVersion)
        try container.encode(self.commandLine, forKey: .commandLine)
        try container.encode(Self.format.format(self.startedAt), forKey: .startedAt)
        try container.encode(Self.format.format(self.endedAt), forKey: .endedAt)
    }
}
