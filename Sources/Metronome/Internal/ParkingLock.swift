internal import CMetronome
import Glibc
import Synchronization

/// A lock of one 32-bit word, for state kept inside objects that exist by the million.
///
/// A `pthread_mutex_t` is 40 bytes and must not move, so it needs an allocation of its own
/// (``LockedBox``). This lock is a word in its owner: taking a free lock and releasing one
/// that nobody waits for are one compare-exchange each. A thread that finds it held yields
/// a few times, then parks on one of a few condition variables shared by every lock,
/// chosen by the owner's address, as WebKit's locks and Rust's `parking_lot` do.
///
/// Every acquisition is a compare-exchange on the word itself, never a handover through the
/// kernel, so ThreadSanitizer sees each one (it reports a false race for
/// `Synchronization.Mutex`, whose contended acquisitions it cannot see).
struct ParkingLock: ~Copyable, Sendable {
    private static let held: UInt32 = 1
    /// Some thread is parked, or about to park, waiting for this lock.
    private static let parked: UInt32 = 2
    /// Yields before parking: a lock guarding a few dozen instructions is usually free
    /// again within one.
    private static let yieldsBeforeParking = 40

    private let word = Atomic<UInt32>(0)

    init() {}

    /// Takes the lock; `owner` is the object it lives in, which names its parking place.
    func lock(owner: AnyObject) {
        if self.word.compareExchange(expected: 0, desired: Self.held, ordering: .acquiring).exchanged { return }
        self.lockContended(owner: owner)
    }

    private func lockContended(owner: AnyObject) {
        var yields = 0
        while true {
            let state = self.word.load(ordering: .relaxed)
            if state & Self.held == 0 {
                if self.word.compareExchange(expected: state, desired: state | Self.held, ordering: .acquiring)
                    .exchanged
                {
                    return
                }
                continue
            }
            // Once a thread is parked, later ones park at once rather than yield.
            if state & Self.parked == 0, yields < Self.yieldsBeforeParking {
                yields += 1
                sched_yield()
                continue
            }
            LockParking.park(owner: owner) {
                // Under the place's mutex, which the releaser takes before waking anyone:
                // a thread that marks the lock parked here cannot miss the release.
                let state = self.word.load(ordering: .relaxed)
                guard state & Self.held != 0 else { return false }
                return state & Self.parked != 0
                    || self.word.compareExchange(expected: state, desired: state | Self.parked, ordering: .relaxed)
                        .exchanged
            }
        }
    }

    /// Releases the lock taken with the same `owner`.
    func unlock(owner: AnyObject) {
        if self.word.compareExchange(expected: Self.held, desired: 0, ordering: .releasing).exchanged { return }
        // Parked threads: all of them wake and contend again, and those that lose park
        // again, marking the word anew.
        LockParking.unparkAll(owner: owner) { self.word.store(0, ordering: .releasing) }
    }
}

/// Where threads wait for a ``ParkingLock``: the C core's fixed table of mutexes and
/// condition variables (`mtr_parking.h`), shared by all locks. Static storage there, not a
/// lazily built global here: a fork while the first waiter built it would leave the child
/// waiting on the build for good.
private enum LockParking {
    private static func place(of owner: AnyObject) -> UInt32 {
        // Fibonacci hashing of the address: objects are 16-byte aligned, so its low bits
        // carry nothing.
        let address = UInt(bitPattern: ObjectIdentifier(owner))
        let bits = UInt32(MTR_PARKING_PLACES).trailingZeroBitCount
        return UInt32(truncatingIfNeeded: (address &* 0x9E37_79B9_7F4A_7C15) >> (UInt.bitWidth - bits))
    }

    /// Waits at `owner`'s place if `shouldWait`, asked under the place's mutex, says so.
    /// Returns after a wake-up, spurious or not; the caller looks at its lock again.
    static func park(owner: AnyObject, if shouldWait: () -> Bool) {
        let place = self.place(of: owner)
        mtr_parking_lock(place)
        if shouldWait() { mtr_parking_wait(place) }
        mtr_parking_unlock(place)
    }

    /// Runs `release` under `owner`'s place's mutex and wakes every thread parked there.
    static func unparkAll(owner: AnyObject, after release: () -> Void) {
        let place = self.place(of: owner)
        mtr_parking_lock(place)
        release()
        mtr_parking_wake_all(place)
        mtr_parking_unlock(place)
    }
}
