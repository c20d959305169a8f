import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A timer's lock: one byte inside its state, where a `pthread_mutex_t` would take 40 and
/// most of a timer's memory.
///
/// Taken with one compare-and-swap, released with one exchange: the timer's own operations
/// and its firing almost never meet. A thread that does meet a holder spins briefly, then
/// sleeps on one of a few shared condition variables, picked by the lock's address, until
/// the holder's release wakes it; it never spins for long, so a firing thread at a real-time
/// priority never starves the holder it waits for. The byte's atomics order what the lock
/// guards, as a mutex's would, and ThreadSanitizer sees them; the condition variables only
/// put waiters to sleep.
struct TimerLockWord {
    /// 0 free, 1 held, 2 held with a thread that may be asleep on it. Never read or written
    /// but through ``TimerLock``, as an `Atomic<UInt8>`.
    private var raw: UInt8 = 0

    init() {}
}

enum TimerLock {
    private static let free: UInt8 = 0
    private static let held: UInt8 = 1
    private static let contended: UInt8 = 2

    @inline(__always)
    static func lock(_ word: UnsafeMutablePointer<TimerLockWord>) {
        let atomic = Self.atomic(word)
        if atomic.pointee.compareExchange(expected: Self.free, desired: Self.held, ordering: .acquiring).exchanged {
            return
        }
        Self.lockContended(atomic)
    }

    @inline(__always)
    static func unlock(_ word: UnsafeMutablePointer<TimerLockWord>) {
        let atomic = Self.atomic(word)
        if atomic.pointee.exchange(Self.free, ordering: .releasing) == Self.contended {
            Self.wake(atomic)
        }
    }

    @inline(__always)
    private static func atomic(_ word: UnsafeMutablePointer<TimerLockWord>) -> UnsafeMutablePointer<Atomic<UInt8>> {
        UnsafeMutableRawPointer(word).assumingMemoryBound(to: Atomic<UInt8>.self)
    }

    @inline(never)
    private static func lockContended(_ atomic: UnsafeMutablePointer<Atomic<UInt8>>) {
        // A holder keeps the lock for a few hundred nanoseconds: wait that long awake.
        for _ in 0..<64 {
            if atomic.pointee.load(ordering: .relaxed) == Self.free,
                atomic.pointee.compareExchange(expected: Self.free, desired: Self.held, ordering: .acquiring).exchanged
            {
                return
            }
        }
        // Taken as contended, so that its release wakes whoever else went to sleep meanwhile.
        while atomic.pointee.exchange(Self.contended, ordering: .acquiring) != Self.free {
            let bucket = Self.bucket(of: atomic)
            pthread_mutex_lock(&bucket.pointee.mutex)
            // Checked under the bucket's mutex, which the release takes before it wakes:
            // a release between this check and the wait still finds this thread waiting.
            while atomic.pointee.load(ordering: .relaxed) == Self.contended {
                pthread_cond_wait(&bucket.pointee.condition, &bucket.pointee.mutex)
            }
            pthread_mutex_unlock(&bucket.pointee.mutex)
        }
    }

    @inline(never)
    private static func wake(_ atomic: UnsafeMutablePointer<Atomic<UInt8>>) {
        let bucket = Self.bucket(of: atomic)
        pthread_mutex_lock(&bucket.pointee.mutex)
        pthread_cond_broadcast(&bucket.pointee.condition)
        pthread_mutex_unlock(&bucket.pointee.mutex)
    }

    private struct Bucket {
        var mutex = pthread_mutex_t()
        var condition = pthread_cond_t()
    }

    private static let bucketCount = 64

    /// Made once and never freed: every lock may sleep on them for the process's life.
    private nonisolated(unsafe) static let buckets: UnsafeMutablePointer<Bucket> = {
        let buckets = UnsafeMutablePointer<Bucket>.allocate(capacity: bucketCount)
        for index in 0..<bucketCount {
            (buckets + index).initialize(to: Bucket())
            pthread_mutex_init(&buckets[index].mutex, nil)
            pthread_cond_init(&buckets[index].condition, nil)
        }
        return buckets
    }()

    private static func bucket(of atomic: UnsafeMutablePointer<Atomic<UInt8>>) -> UnsafeMutablePointer<Bucket> {
        // Timers are at least 16-byte aligned: the bits above those spread them.
        let address = UInt(bitPattern: atomic)
        return Self.buckets + Int((address >> 4 ^ address >> 10) % UInt(Self.bucketCount))
    }
}
