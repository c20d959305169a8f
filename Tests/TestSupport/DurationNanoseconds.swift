extension Duration {
    /// This duration in whole nanoseconds, clamped to `Int64`'s range.
    ///
    /// Deadlines and timeouts are `Int64` nanoseconds on `CLOCK_MONOTONIC`; a `Duration` can
    /// hold far more, and an unchecked conversion would trap.
    public var saturatingNanoseconds: Int64 {
        let (seconds, attoseconds) = self.components
        let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds > 0 ? .max : .min }
        let (total, overflowAdding) = whole.addingReportingOverflow(attoseconds / 1_000_000_000)
        if overflowAdding { return seconds > 0 ? .max : .min }
        return total
    }
}
