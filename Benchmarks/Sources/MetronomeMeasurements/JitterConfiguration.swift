/// What a jitter run measures: repeating timers on an absolute schedule.
///
/// Timer `i` (0-based) of `timers` fires for deadlines
/// `start + i·interval/timers + k·interval`, k = 0, 1, 2, …: the timers are spread evenly
/// across one interval, so with several timers the lateness measures timer precision rather
/// than handlers queueing behind each other at one shared instant. Every subject computes its
/// deadlines with ``deadline(timer:tick:start:)`` so comparisons are fair.
public struct JitterConfiguration: Sendable, Codable, Equatable {
    /// The period of every timer, in nanoseconds.
    public var intervalNanoseconds: Int64
    /// Samples to record, over all timers, after the warm-up.
    public var samples: Int
    /// Repeating timers running at once.
    public var timers: Int
    /// How late each firing may be allowed to come, in nanoseconds.
    public var leewayNanoseconds: Int64
    /// Busy work each handler does after recording, in nanoseconds.
    public var handlerWorkNanoseconds: Int64
    /// Firings discarded before recording starts, over all timers.
    public var warmup: Int
    /// The clock deadlines are armed on and firings read from.
    public var clock: MeasurementClock

    /// How far in the future the first deadline is placed: 20 ms plus 25 µs per timer, so every
    /// timer is armed before it and no backend is charged for the time it takes to arm the rest.
    public var startLeadNanoseconds: Int64 {
        20_000_000 + Int64(self.timers) * 25_000
    }

    enum CodingKeys: String, CodingKey {
        case intervalNanoseconds = "interval_ns"
        case samples
        case timers
        case leewayNanoseconds = "leeway_ns"
        case handlerWorkNanoseconds = "handler_work_ns"
        case warmup
        case clock
    }

    /// Creates a configuration; the defaults are one 1 ms timer, 10 000 samples.
    public init(
        intervalNanoseconds: Int64 = 1_000_000,
        samples: Int = 10_000,
        timers: Int = 1,
        leewayNanoseconds: Int64 = 0,
        handlerWorkNanoseconds: Int64 = 0,
        warmup: Int = 100,
        clock: MeasurementClock = .monotonic
    ) {
        self.intervalNanoseconds = intervalNanoseconds
        self.samples = samples
        self.timers = timers
        self.leewayNanoseconds = leewayNanoseconds
        self.handlerWorkNanoseconds = handlerWorkNanoseconds
        self.warmup = warmup
        self.clock = clock
    }

    /// Checks every value is in range.
    ///
    /// - Throws: ``MeasurementError/invalidConfiguration(_:)`` naming the first bad value.
    public func validate() throws(MeasurementError) {
        guard self.intervalNanoseconds > 0 else { throw .invalidConfiguration("interval must be positive") }
        guard self.samples > 0 else { throw .invalidConfiguration("samples must be positive") }
        guard self.timers > 0, self.timers <= 100_000_000 else {
            throw .invalidConfiguration("timers must be between 1 and 100 000 000")
        }
        guard self.leewayNanoseconds >= 0 else { throw .invalidConfiguration("leeway must not be negative") }
        guard self.handlerWorkNanoseconds >= 0 else {
            throw .invalidConfiguration("handler work must not be negative")
        }
        guard self.warmup >= 0 else { throw .invalidConfiguration("warm-up must not be negative") }
        // Deadlines must stay representable until the run's timeout, with room to spare.
        let firings = Int64(self.firingsPerTimer)
        guard self.intervalNanoseconds <= Int64.max / 4 / max(firings, 1) else {
            throw .invalidConfiguration("interval × samples overflows 64-bit nanoseconds")
        }
    }

    /// A start instant ``startLeadNanoseconds`` from `now` (by default now on ``clock``), for
    /// ``deadline(timer:tick:start:)``.
    public func start(now: Int64? = nil) -> Int64 {
        (now ?? self.clock.now()) + self.startLeadNanoseconds
    }

    /// The `tick`-th deadline (from 0) of timer `timer` (from 0), in ns on ``clock``.
    public func deadline(timer: Int, tick: Int64, start: Int64) -> Int64 {
        start + Int64(timer) * self.intervalNanoseconds / Int64(self.timers) + tick * self.intervalNanoseconds
    }

    /// Firings each timer must deliver for the run to complete, warm-up included.
    public var firingsPerTimer: Int {
        (self.warmup + self.samples + self.timers - 1) / self.timers
    }

    /// How long a subject waits for the recorder before giving up: twice the expected run
    /// time plus 5 s, generous because the machines are shared. The last firing may come
    /// a leeway after its deadline, and a backend that coalesces fires at the window's end.
    public var completionTimeout: Duration {
        let expected =
            self.startLeadNanoseconds + Int64(self.firingsPerTimer) * self.intervalNanoseconds
            + self.leewayNanoseconds
        return .nanoseconds(2 * expected) + .seconds(5)
    }
}
