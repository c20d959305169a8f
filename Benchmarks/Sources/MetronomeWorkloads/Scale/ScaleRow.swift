/// A row of a `metronome scale --workload timers` report: a backend's row of the timers
/// table, or a row of the armed-count table; each is one flat JSON object.
public enum ScaleRow: Codable, Sendable {
    case timers(ScaleResult)
    case armed(ArmedScaleResult)

    /// Only an armed-count row has an `armed` key.
    public init(from decoder: any Decoder) throws {
        if let armed = try? ArmedScaleResult(from: decoder) {
            self = .armed(armed)
        } else {
            self = .timers(try ScaleResult(from: decoder))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        switch self {
        case .timers(let row): try row.encode(to: encoder)
        case .armed(let row): try row.encode(to: encoder)
        }
    }
}
