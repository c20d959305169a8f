/// Steele, Lea and Flood's SplitMix64: a tiny, seeded, deterministic random number generator.
///
/// Coalescing runs must place the same deadlines for every backend and every run with the same
/// seed, and a failing randomized test must replay from the seed it reports;
/// `SystemRandomNumberGenerator` cannot be seeded.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64

    /// Creates a generator; equal seeds give equal sequences.
    public init(seed: UInt64) {
        self.state = seed
    }

    /// The next 64 random bits.
    public mutating func next() -> UInt64 {
        self.state &+= 0x9E37_79B9_7F4A_7C15
        var z = self.state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A uniformly distributed value in `0..<bound`.
    ///
    /// Uses the high half of a full-width multiply (Lemire's method without the rejection
    /// step, a bias below 2⁻³² for bounds under 2³²) rather than `Int64.random(in:using:)`,
    /// whose algorithm the standard library may change between releases.
    ///
    /// - Parameter bound: The exclusive upper limit; must be positive.
    public mutating func next(below bound: Int64) -> Int64 {
        precondition(bound > 0, "bound must be positive")
        return Int64(self.next().multipliedFullWidth(by: UInt64(bound)).high)
    }
}
