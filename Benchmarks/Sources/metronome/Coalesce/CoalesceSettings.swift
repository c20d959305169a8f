/// What a coalesce run was asked for beyond the measurement's settings: the load and the
/// backends.
struct CoalesceSettings: Codable, Sendable {
    var load: Int
    var backends: [String]
}
