import MetronomeMeasurements

/// Which armed timer, or live session, each operation of a measured phase picks.
///
/// With a million of them the table outgrows the caches, so a pick at random costs a
/// cache miss before the operation starts, as the requests of a server do. Picking them in
/// the order they were made lets the prefetcher hide that miss: what remains is what the
/// operation itself costs with that many armed.
public enum AccessOrder: String, Codable, Sendable, CaseIterable {
    /// Uniform at random.
    case random
    /// Creation order, wrapping around.
    case creation

    /// The picks among `count` of one thread: `thread` seeds the random ones and spreads
    /// the threads' starting points in creation order.
    func picks(among count: Int, seed: UInt64, thread: Int = 0, of threads: Int = 1) -> AccessPicks {
        AccessPicks(
            order: self, count: count, random: SplitMix64(seed: seed &+ UInt64(thread)),
            cursor: count / threads * thread)
    }
}

/// The indices one thread's operations pick, in an ``AccessOrder``.
struct AccessPicks {
    let order: AccessOrder
    let count: Int
    var random: SplitMix64
    var cursor: Int

    mutating func next() -> Int {
        switch self.order {
        case .random:
            return Int(self.random.next(below: Int64(self.count)))
        case .creation:
            defer { self.cursor = self.cursor + 1 == self.count ? 0 : self.cursor + 1 }
            return self.cursor
        }
    }
}
