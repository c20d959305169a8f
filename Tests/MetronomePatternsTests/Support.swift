import Foundation
import Metronome
import Testing

/// A counter and log behind a lock, with a condition to wait on with a timeout.
final class Recorder<Entry: Sendable>: @unchecked Sendable {
    private let condition = NSCondition()
    private var storage: [Entry] = []

    func append(_ entry: Entry) {
        self.condition.lock()
        self.storage.append(entry)
        self.condition.broadcast()
        self.condition.unlock()
    }

    var entries: [Entry] {
        self.condition.lock()
        defer { self.condition.unlock() }
        return self.storage
    }

    var count: Int { self.entries.count }

    /// Blocks until at least `count` entries were recorded or `timeout` passed.
    @discardableResult
    func wait(forCount count: Int, timeout: Duration) -> Bool {
        let deadline = Date().addingTimeInterval(Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18)
        self.condition.lock()
        defer { self.condition.unlock() }
        while self.storage.count < count {
            if !self.condition.wait(until: deadline) { return self.storage.count >= count }
        }
        return true
    }
}

/// Polls `condition` every millisecond until it holds or `timeout` passes.
func eventually(timeout: Duration = .seconds(5), _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(1))
    }
    return condition()
}

/// Spins (no syscall) for `duration` on the monotonic clock.
func spin(for duration: Duration) {
    let end = TimerClock.monotonic.now().advanced(by: duration)
    while TimerClock.monotonic.now() < end {}
}

func makeEngine() throws -> TimerEngine {
    try TimerEngine()
}
