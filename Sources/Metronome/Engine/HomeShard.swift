#if Engine
import Glibc
import Synchronization

/// The shard a thread makes its ``ExpiringValue``s in. Threads take tickets in turn on their
/// first use, as they do for the engine's timers, so distinct threads spread evenly over
/// the shards whatever CPUs they run on, and threads that make and release values share no
/// lock.
enum HomeShard {
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key, nil)
        return key
    }()

    private static let tickets = Atomic<Int>(0)

    /// The current thread's shard among `count`.
    static func current(among count: Int) -> Int {
        guard count > 1 else { return 0 }
        // Stored plus one: a thread without a ticket reads nil.
        if let stored = pthread_getspecific(self.key) { return (Int(bitPattern: stored) - 1) % count }
        let ticket = self.tickets.add(1, ordering: .relaxed).oldValue & Int(Int32.max)
        pthread_setspecific(self.key, UnsafeRawPointer(bitPattern: ticket + 1))
        return ticket % count
    }
}
#endif
