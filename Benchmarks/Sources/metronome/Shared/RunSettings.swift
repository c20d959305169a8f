/// A report's `config`: the measurement's settings and the command's own, in one flat
/// object, the command's keys beside the measurement's rather than nested under a key of
/// their own, so that a reader finds every setting of the run at the same level.
struct RunSettings<Measurement: Codable & Sendable, Command: Codable & Sendable>: Codable, Sendable {
    var measurement: Measurement
    var command: Command

    init(measurement: Measurement, command: Command) {
        self.measurement = measurement
        self.command = command
    }

    init(from decoder: any Decoder) throws {
        self.measurement = try Measurement(from: decoder)
        self.command = try Command(from: decoder)
    }

    func encode(to encoder: any Encoder) throws {
        try self.measurement.encode(to: encoder)
        try self.command.encode(to: encoder)
    }
}
