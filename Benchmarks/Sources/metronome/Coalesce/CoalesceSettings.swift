import MetronomeMeasurements

/// Everything a coalesce run was asked for, as its report's `config`: the measurement's
/// settings, the load and the backends, in one flat object.
struct CoalesceSettings: Codable, Sendable {
    var measurement: CoalesceConfiguration
    var load: Int
    var backends: [String]

    enum CodingKeys: String, CodingKey {
        case load, backends
    }

    init(measurement: CoalesceConfiguration, load: Int, backends: [String]) {
        self.measurement = measurement
        self.load = load
        self.backends = backends
    }

    init(from decoder: any Decoder) throws {
        self.measurement = try CoalesceConfiguration(from: decoder)
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.load = try container.decode(Int.self, forKey: .load)
        self.backends = try container.decode([String].self, forKey: .backends)
    }

    func encode(to encoder: any Encoder) throws {
        try self.measurement.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(self.load, forKey: .load)
        try container.encode(self.backends, forKey: .backends)
    }
}
