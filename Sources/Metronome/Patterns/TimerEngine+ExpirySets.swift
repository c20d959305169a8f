#if Engine
extension ExpirySet {
    /// An engine's slot: a million values touched at random fall due over every millisecond
    /// of their lifetime, so a slot this wide shares its timer among many of them while
    /// adding at most a millisecond to an idle timeout.
    static var engineGranularity: Int64 { 1_000_000 }
}

extension TimerEngine {
    /// The set for values of `Value` in the current thread's shard, made on first use and
    /// kept while a value or an armed slot holds it: as with timers, threads that make and
    /// release their own values take no lock another thread takes.
    func expirySet<Value: Sendable>(of type: Value.Type) -> ExpirySet<Value> {
        let fresh = { ExpirySet<Value>(firing: self, granularity: ExpirySet<Value>.engineGranularity) }
        // A dead copy's table lock may be held by a thread the fork left behind.
        guard !self.isInherited else { return fresh() }
        return self.shardObjects.object(for: ObjectIdentifier(type), make: fresh)
    }
}
#endif
