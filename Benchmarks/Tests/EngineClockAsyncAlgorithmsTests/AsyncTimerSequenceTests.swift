import AsyncAlgorithms
import Metronome
import MetronomeMeasurements
import Testing

/// swift-async-algorithms' `AsyncTimerSequence` on `EngineClock`. It lives in this package
/// so that the library's own package resolves no third-party package.
@Suite(.serialized)
struct AsyncTimerSequenceTests {
    /// An `EngineClock` that records every deadline it is asked to sleep until.
    struct RecordingClock: Clock {
        typealias Duration = Swift.Duration
        typealias Instant = TimerInstant

        let base: EngineClock
        let deadlines = LockedCondition<[TimerInstant]>([])

        var now: TimerInstant { self.base.now }
        var minimumResolution: Duration { self.base.minimumResolution }

        func sleep(until deadline: TimerInstant, tolerance: Duration?) async throws {
            self.deadlines.withLock { $0.append(deadline) }
            try await self.base.sleep(until: deadline, tolerance: tolerance)
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func asyncTimerSequenceHasNoDriftAndIsNeverEarly() async throws {
        let engine = try TimerEngine()
        let interval = Duration.milliseconds(1)
        let recording = RecordingClock(base: EngineClock(backend: .engine(engine)))
        var yielded: [TimerInstant] = []
        yielded.reserveCapacity(1000)
        for await instant in AsyncTimerSequence(interval: interval, clock: recording) {
            yielded.append(instant)
            if yielded.count == 1000 { break }
        }
        let deadlines = recording.deadlines.withLock { $0 }
        #expect(deadlines.count >= 1000)
        let start = deadlines[0].advanced(by: .zero - interval)
        var exact = 0
        var early = 0
        for k in 0..<1000 {
            if deadlines[k] == start.advanced(by: interval * (k + 1)) { exact += 1 }
            if yielded[k] < deadlines[k] { early += 1 }
        }
        // No drift: every deadline is start + k·interval exactly, however late a resumption
        // came (how late depends on the machine's load, so it is not asserted).
        #expect(exact == 1000)
        #expect(early == 0)
        // Leaving the loop cancels the sleeping task, which disarms its timer.
        let disarmed = ContinuousClock.now + .seconds(5)
        while engine.counters.armed != 0, ContinuousClock.now < disarmed {
            try await Task.sleep(for: .milliseconds(1))
        }
        #expect(engine.counters.armed == 0)
    }
}
