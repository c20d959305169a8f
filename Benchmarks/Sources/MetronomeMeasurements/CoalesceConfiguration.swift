/// What a coalescing run measures: many one-shot timers with leeway, spread at random.
///
/// `timers` deadlines fall uniformly at random in a window of `windowNanoseconds` that opens
/// ``startLeadNanoseconds`` from now. Each may fire anywhere in `[deadline, deadline + leeway]`,
/// so a backend that coalesces needs far fewer wake-ups than timers; ``StabbingOptimum`` gives
/// the fewest possible. The seed makes the offsets identical for every backend and every run.
public struct CoalesceConfiguration: Sendable, Codable, Equatable {
    /// One-shot timers to arm.
    public var timers: Int
    /// The span the deadlines are spread over, in nanoseconds.
    public var windowNanoseconds: Int64
    /// How late each timer may fire, in nanoseconds.
    public var leewayNanoseconds: Int64
    /// Seeds the ``SplitMix64`` that places the deadlines.
    public var seed: UInt64

    /// How far from now the window opens: 50 ms plus 25 µs per timer.
    ///
    /// Every timer must be armed before the earliest deadline, or the backend is charged for
    /// the time it took to arm the rest.
    public var startLeadNanoseconds: Int64 {
        50_000_000 + Int64(self.timers) * 25_000
    }

    enum CodingKeys: String, CodingKey {
        case timers
        case windowNanoseconds = "window_ns"
        case leewayNanoseconds = "leeway_ns"
        case seed
    }

    /// Creates a configuration; the defaults are 10 000 timers over 2 s with 50 ms leeway.
    public init(
        timers: Int = 10_000,
        windowNanoseconds: Int64 = 2_000_000_000,
        leewayNanoseconds: Int64 = 50_000_000,
        seed: UInt64 = 1
    ) {
        self.timers = timers
        self.windowNanoseconds = windowNanoseconds
        self.leewayNanoseconds = leewayNanoseconds
        self.seed = seed
    }

    /// Checks every value is in range.
    ///
    /// - Throws: ``MeasurementError/invalidConfiguration(_:)`` naming the first bad value.
    public func validate() throws(MeasurementError) {
        guard self.timers > 0, self.timers <= 100_000_000 else {
            throw .invalidConfiguration("timers must be between 1 and 100 000 000")
        }
        guard self.windowNanoseconds > 0 else { throw .invalidConfiguration("window must be positive") }
        guard self.leewayNanoseconds >= 0 else { throw .invalidConfiguration("leeway must not be negative") }
        guard self.windowNanoseconds <= Int64.max / 8, self.leewayNanoseconds <= Int64.max / 8 else {
            throw .invalidConfiguration("window or leeway overflows 64-bit nanoseconds")
        }
    }

    /// The absolute `CLOCK_MONOTONIC` deadlines for one run, in arming order (not sorted).
    ///
    /// - Parameter now: The current time; the window opens ``startLeadNanoseconds`` later.
    public func deadlines(now: Int64 = MonotonicTime.now()) -> [Int64] {
        var random = SplitMix64(seed: self.seed)
        let opens = now + self.startLeadNanoseconds
        return (0..<self.timers).map { _ in opens + random.next(below: self.windowNanoseconds) }
    }

    /// The fewest wake-ups that can fire every timer within its leeway.
    ///
    /// - Parameter deadlines: Deadlines from ``deadlines(now:)``.
    public func optimumWakeups(for deadlines: [Int64]) -> Int {
        StabbingOptimum.minimumPoints(deadlines.map { $0...($0 + self.leewayNanoseconds) })
    }

    /// How long a subject waits for every timer before giving up: twice the run plus 5 s.
    public var completionTimeout: Duration {
        let expected = self.startLeadNanoseconds + self.windowNanoseconds + self.leewayNanoseconds
        return .nanoseconds(2 * expected) + .seconds(5)
    }
}
