import Glibc
import MetronomeTestSupport
import Synchronization
import Testing

@testable import Metronome

/// The one-word lock that guards each timer's state: one holder at a time whatever the
/// contention, and every parked waiter woken by a release.
@Suite
struct ParkingLockTests {
    /// State guarded by its own lock, recording any second holder it sees.
    private final class Guarded: @unchecked Sendable {
        let lock = ParkingLock()
        // Reached only under `lock`.
        var count = 0
        var isHeld = false
        var overlaps = 0

        func increment(yielding: Bool) {
            self.lock.lock(owner: self)
            defer { self.lock.unlock(owner: self) }
            if self.isHeld { self.overlaps += 1 }
            self.isHeld = true
            // Holding it across a yield makes the others find it held, spin and park.
            if yielding { sched_yield() }
            self.count += 1
            self.isHeld = false
        }
    }

    /// Eight threads over more locks than there are parking places, so that locks share
    /// places: every increment counted, and never two holders of one lock.
    @Test(.timeLimit(.minutes(1)))
    func oneHolderAtATimeWhateverTheContention() throws {
        let locks = (0..<100).map { _ in Guarded() }
        let threads = 8
        let increments = 20_000
        let workers = try (0..<threads).map { thread in
            try PosixThread.spawn {
                var random = SplitMix64(seed: UInt64(thread))
                for step in 0..<increments {
                    // A few hot locks most of the time, so that threads meet on them.
                    let bound: Int64 = step % 4 == 0 ? 100 : 3
                    locks[Int(random.next(below: bound))].increment(yielding: step % 16 == 0)
                }
            }
        }
        workers.forEach { $0.join() }
        let counted = locks.reduce(0) { total, guarded in
            guarded.lock.lock(owner: guarded)
            defer { guarded.lock.unlock(owner: guarded) }
            #expect(guarded.overlaps == 0)
            return total + guarded.count
        }
        #expect(counted == threads * increments)
    }

    /// Waiters that find the lock held for long park, none gets it while it is held, and
    /// the release wakes every one of them (a lost wake-up would hang to the time limit).
    @Test(.timeLimit(.minutes(1)))
    func aReleaseWakesEveryParkedWaiter() throws {
        let guarded = Guarded()
        let started = Atomic<Int>(0)
        guarded.lock.lock(owner: guarded)
        let waiters = try (0..<4).map { _ in
            try PosixThread.spawn {
                started.add(1, ordering: .relaxed)
                guarded.increment(yielding: false)
            }
        }
        while started.load(ordering: .relaxed) < 4 { sched_yield() }
        // Far longer than a waiter's yields before it parks.
        usleep(50_000)
        #expect(guarded.count == 0)
        guarded.lock.unlock(owner: guarded)
        waiters.forEach { $0.join() }
        guarded.lock.lock(owner: guarded)
        #expect(guarded.count == 4 && guarded.overlaps == 0)
        guarded.lock.unlock(owner: guarded)
    }
}
