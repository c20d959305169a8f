import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A timer's lock: one byte inside its state, where a `pthread_mutex_t` would take 40 and
/// most of a timer's memory.
///
/// Taken with one compare-and-swap and released with a plain store: a timer's own
/// operations and its firing almost never meet, and every locked instruction spared is a
/// share of an arming's cost. So a release wakes no one, and a thread that meets a holder
/// waits by itself: it spins for about as long as a holder keeps the lock (a few hundred
/// nanoseconds, one call into the core), then yields, then sleeps in growing steps of at
/// most 100 µs. It never spins for long, so a firing thread at a real-time priority never
/// starves a holder it preempted. The byte's atomics order what the lock guards, as a
/// mutex's would, and ThreadSanitizer sees them.
struct TimerLockWord {
    /// 0 free, 1 held. Never read or written but through ``TimerLock``, as an
    /// `Atomic<UInt8>`.
    private var raw: UInt8 = 0

    init() {}
}

enum TimerLock {
    private static let free: UInt8 = 0
    private static let held: UInt8 = 1

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
        Self.atomic(word).pointee.store(Self.free, ordering: .releasing)
    }

    @inline(__always)
    private static func atomic(_ word: UnsafeMutablePointer<TimerLockWord>) -> UnsafeMutablePointer<Atomic<UInt8>> {
        UnsafeMutableRawPointer(word).assumingMemoryBound(to: Atomic<UInt8>.self)
    }

    @inline(never)
    private static func lockContended(_ atomic: UnsafeMutablePointer<Atomic<UInt8>>) {
        var attempts = 0
        var sleep = timespec(tv_sec: 0, tv_nsec: 1_000)
        while true {
            if atomic.pointee.load(ordering: .relaxed) == Self.free,
                atomic.pointee.compareExchange(expected: Self.free, desired: Self.held, ordering: .acquiring).exchanged
            {
                return
            }
            attempts += 1
            if attempts < 128 { continue }
            // A holder still there has been preempted, or waits in the core: let it run.
            if attempts < 192 {
                sched_yield()
            } else {
                nanosleep(&sleep, nil)
                sleep.tv_nsec = min(sleep.tv_nsec * 2, 100_000)
            }
        }
    }
}
