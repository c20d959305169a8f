/// The unit a table prints latencies in: microseconds, or nanoseconds as cyclictest's `-N`
/// prints them. Reports keep their own units whatever a table shows.
public enum LatencyUnit: Sendable {
    case microseconds
    case nanoseconds

    /// `µs` or `ns`, for column headers.
    public var symbol: String {
        switch self {
        case .microseconds: "µs"
        case .nanoseconds: "ns"
        }
    }

    /// A latency given in microseconds, as text in this unit; nanoseconds are whole, the
    /// resolution every latency is measured at.
    public func text(_ microseconds: Double) -> String {
        switch self {
        case .microseconds: NumberText.microseconds(microseconds)
        case .nanoseconds: NumberText.fixed(microseconds * 1_000, places: 0)
        }
    }
}
