import Foundation
import Glibc
import MetronomeTestSupport
import Synchronization
import Testing

@testable import Metronome

/// The timers' one-word lock across `fork()`: a child forked while other threads park and
/// wake on such locks can still park and wake on every parking place.
@Suite(.serialized)
struct ParkingLockForkTests {
    static let forkVariable = "METRONOME_PARKING_FORK_CHILD"

    /// ThreadSanitizer does not support threads started in the child of a fork taken while
    /// other threads run: its runtime's own locks may be held there, and a child then hangs
    /// in it (one CI run's child did).
    static let underThreadSanitizer = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "__tsan_init") != nil

    private final class Guarded: @unchecked Sendable {
        let lock = ParkingLock()

        /// Holds the lock across a yield, so that other threads find it held and park.
        func holdBriefly() {
            self.lock.lock(owner: self)
            sched_yield()
            self.lock.unlock(owner: self)
        }
    }

    @Test(.disabled(if: underThreadSanitizer), .timeLimit(.minutes(2)))
    func parkingInForkedChildren() throws {
        try expectTestPassesInAProcessOfItsOwn("forkedChildrenParkAndWake", enabledBy: Self.forkVariable)
    }

    /// Forks thirty children while four threads keep parking on a few locks, so that the
    /// parking places' mutexes and condition variables are in use at the fork, and the
    /// first fork may meet the process's first park, which must not leave the child waiting
    /// on the places' setup. Each child
    /// parks a waiter behind each of 128 locks held for a millisecond, which spreads over
    /// the places, and releases it; a child that hangs for 10 s is killed.
    @Test(.enabled(if: ProcessInfo.processInfo.environment[forkVariable] != nil), .timeLimit(.minutes(1)))
    func forkedChildrenParkAndWake() throws {
        let hot = (0..<4).map { _ in Guarded() }
        let stop = Atomic<Bool>(false)
        let hammers = try (0..<4).map { thread in
            try PosixThread.spawn {
                var step = thread
                while !stop.load(ordering: .relaxed) {
                    hot[step % hot.count].holdBriefly()
                    step += 1
                }
            }
        }
        defer {
            stop.store(true, ordering: .relaxed)
            hammers.forEach { $0.join() }
        }
        for _ in 0..<30 {
            usleep(5_000)
            let pid = fork()
            if pid == 0 {
                for owner in (0..<128).map({ _ in Guarded() }) {
                    owner.lock.lock(owner: owner)
                    guard let waiter = try? PosixThread.spawn({ owner.holdBriefly() }) else { _exit(10) }
                    usleep(1_000)
                    owner.lock.unlock(owner: owner)
                    waiter.join()
                }
                _exit(0)
            }
            try #require(pid > 0)
            var status: Int32 = 0
            var waited = 0
            while waitpid(pid, &status, WNOHANG) == 0, waited < 10_000 {
                usleep(1_000)
                waited += 1
            }
            if waited == 10_000 {
                kill(pid, SIGKILL)
                waitpid(pid, &status, 0)
                Issue.record("a forked child hung parking or waking")
                return
            }
            try #require(status == 0, "child status \(status): signal \(status & 0x7f), exit \((status >> 8) & 0xff)")
        }
    }
}
