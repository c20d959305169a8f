@preconcurrency import Dispatch
import Foundation
import Metronome
import MetronomeMeasurements

/// A session timeout that a request prolongs.
public protocol TouchableSession: AnyObject, Sendable {
    /// Starts a new lifetime; `false` if the session had already expired.
    func touch() -> Bool
    /// Whether the session has expired.
    var isExpired: Bool { get }
}

extension ExpiringValue: TouchableSession {}

/// One implementation's run of the workload.
public struct SessionsProbe<Session: TouchableSession> {
    let name: String
    let config: SessionsConfiguration
    /// Makes session `id` living `lifetime` nanoseconds; with a log, its expiry is
    /// recorded there.
    let make: (_ id: Int, _ lifetime: Int64, _ log: ExpiryLog?) -> Session

    /// A run named `name` of `config`, with `make` building the sessions.
    public init(
        name: String, config: SessionsConfiguration,
        make: @escaping (_ id: Int, _ lifetime: Int64, _ log: ExpiryLog?) -> Session
    ) {
        (self.name, self.config, self.make) = (name, config, make)
    }

    public func run() throws(MeasurementError) -> SessionsResult {
        let n = self.config.values
        let ops = self.config.operations

        let before = ScaleProbe.residentBytes()
        let live = (0..<n).map { self.make($0, self.config.lifetimeNanoseconds, nil) }
        let bytes = Double(ScaleProbe.residentBytes() - before) / Double(n)

        // The share that expires while the touches run; every other one is touched once, so
        // its timer finds a later expiry than it was armed for.
        let log = ExpiryLog(expected: self.config.expiring)
        let lifetime = self.config.expiringLifetimeNanoseconds
        var deadlines = [Int64](repeating: 0, count: self.config.expiring)
        let expiring = (0..<self.config.expiring).map { id in
            deadlines[id] = MonotonicTime.now() + lifetime
            return self.make(id, lifetime, log)
        }
        for id in stride(from: 0, to: expiring.count, by: 2) {
            let touchedAt = MonotonicTime.now()
            if expiring[id].touch() { deadlines[id] = touchedAt + lifetime }
        }

        var picks = self.config.order.picks(among: n, seed: self.config.seed)
        let oneThread = ScaleProbe.rate(ops) { _ in
            _ = live[picks.next()].touch()
        }
        // Reaching a session without changing it: the part of a touch's cost that is the
        // harness picking, loading and retaining the session.
        var readPicks = self.config.order.picks(among: n, seed: self.config.seed)
        var expired = 0
        let reads = ScaleProbe.rate(ops) { _ in
            if live[readPicks.next()].isExpired { expired += 1 }
        }
        let threads = ProcessInfo.processInfo.activeProcessorCount
        let order = self.config.order
        let allCores = try ScaleProbe.rate(threads: threads, operationsPerThread: ops) { thread in
            var picks = order.picks(among: n, seed: 99, thread: thread, of: threads)
            for _ in 0..<ops {
                _ = live[picks.next()].touch()
            }
        }
        log.waitUntilComplete(timeoutSeconds: 60)
        // Give a wrong second expiry the time to show up.
        usleep(100_000)
        let expiries = log.summary(deadlines: deadlines)
        withExtendedLifetime((live, expiring)) {}
        return SessionsResult(
            backend: self.name, values: n, touchesPerSecond: oneThread, touchesPerSecondAllCores: allCores,
            readsPerSecond: reads, readsExpired: expired,
            bytesPerValue: bytes, expiring: self.config.expiring, expiredOnce: expiries.once,
            expiredMoreThanOnce: expiries.moreThanOnce, neverExpired: expiries.never, early: expiries.latency.early,
            p50LatenessMicroseconds: expiries.latency.p50Microseconds,
            p99LatenessMicroseconds: expiries.latency.p99Microseconds)
    }
}

/// A session timeout the way Swift code keeps one on GCD today: each touch cancels the
/// pending `DispatchWorkItem` and schedules a new one with `asyncAfter`. The generation
/// check makes it exactly-once: a cancelled item that already started does nothing.
public final class DispatchSession: TouchableSession, @unchecked Sendable {
    private let lock = NSLock()
    private var alive = true
    private var generation: UInt64 = 0
    private var pending: DispatchWorkItem?
    private let id: Int
    private let lifetime: DispatchTimeInterval
    private let queue: DispatchQueue
    private let onExpiry: @Sendable (Int) -> Void

    public init(id: Int, lifetime: Int64, queue: DispatchQueue, onExpiry: @escaping @Sendable (Int) -> Void) {
        self.id = id
        self.lifetime = .nanoseconds(Int(lifetime))
        self.queue = queue
        self.onExpiry = onExpiry
        _ = self.touch()
    }

    public var isExpired: Bool {
        self.lock.lock()
        defer { self.lock.unlock() }
        return !self.alive
    }

    public func touch() -> Bool {
        self.lock.lock()
        guard self.alive else {
            self.lock.unlock()
            return false
        }
        self.pending?.cancel()
        self.generation += 1
        let generation = self.generation
        let item = DispatchWorkItem { [weak self] in self?.expire(generation: generation) }
        self.pending = item
        self.lock.unlock()
        self.queue.asyncAfter(deadline: .now() + self.lifetime, execute: item)
        return true
    }

    private func expire(generation: UInt64) {
        self.lock.lock()
        guard self.alive, self.generation == generation else {
            self.lock.unlock()
            return
        }
        self.alive = false
        self.pending = nil
        self.lock.unlock()
        self.onExpiry(self.id)
    }
}
