import Foundation
import Metronome
import MetronomeTesting
import Synchronization
import Testing

@Suite(.serialized)
struct TimerTicksTests: EngineSuite {
    let engine: TimerEngine

    @Test(.timeLimit(.minutes(1)))
    func ticksFollowTheAbsoluteSchedule() async throws {
        let before = TimerClock.monotonic.now()
        var ticks: [Tick] = []
        for await tick in self.engine.ticks(every: .milliseconds(2)) {
            ticks.append(tick)
            if ticks.count == 50 { break }
        }
        let first = ticks[0]
        #expect(first.missed == Int(first.sequence))
        #expect(first.scheduled >= before.advanced(by: .milliseconds(2)))
        for (previous, tick) in zip(ticks, ticks.dropFirst()) {
            #expect(tick.sequence == previous.sequence + UInt64(tick.missed) + 1)
            #expect(
                tick.scheduled == first.scheduled.advanced(by: .milliseconds(2) * Int(tick.sequence - first.sequence)))
        }
        for tick in ticks {
            #expect(tick.fired >= tick.scheduled)
        }
        // Released by `break`; the firing thread may hold the storage for a moment longer.
        #expect(await eventually { self.engine.counters.armed == 0 })
    }

    @Test(.timeLimit(.minutes(1)))
    func aStalledConsumerSeesMissedPeriods() async throws {
        var ticks: [Tick] = []
        for await tick in self.engine.ticks(every: .milliseconds(1)) {
            ticks.append(tick)
            if ticks.count == 5 { break }
            // The stall under test, not a wait for something.
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(ticks.count == 5)
        #expect(ticks.dropFirst().contains { $0.missed >= 10 })
        for (previous, tick) in zip(ticks, ticks.dropFirst()) {
            #expect(tick.sequence == previous.sequence + UInt64(tick.missed) + 1)
        }
        // `break` released the iterator, which disarms the timer.
        #expect(await eventually { self.engine.counters.armed == 0 })
    }

    @Test(.timeLimit(.minutes(1)))
    func cancellingTheTaskEndsIterationAndDisarms() async throws {
        let seen = Recorder<Tick>()
        let engine = self.engine
        let task = Task {
            for await tick in engine.ticks(every: .milliseconds(1)) {
                seen.append(tick)
            }
            return seen.count
        }
        // Awaited, not blocked on: the consuming task needs a thread of the cooperative pool,
        // whose other threads (two on two CPUs) tests running alongside may be blocking.
        #expect(await eventually { seen.count >= 3 })
        #expect(engine.counters.armed == 1)
        task.cancel()
        let count = await task.value
        #expect(count >= 3)
        #expect(await eventually { engine.counters.armed == 0 })
    }

    @Test(.timeLimit(.minutes(1)))
    func anIteratorDroppedBeforeUseDisarms() async throws {
        do {
            var iterator = self.engine.ticks(every: .milliseconds(1)).makeAsyncIterator()
            #expect(self.engine.counters.armed == 1)
            let tick = await iterator.next()
            #expect(tick != nil)
        }
        #expect(await eventually { self.engine.counters.armed == 0 })
    }

    /// A sequence whose engine shuts down while it is iterated finishes, whether its
    /// consumer is waiting for a tick or not.
    @Test(.timeLimit(.minutes(1)))
    func aShutdownFinishesTheSequencesOnItsEngine() async throws {
        let engine = try makeEngine()
        let waiting = Task {
            var count = 0
            for await _ in engine.ticks(every: .seconds(3600)) { count += 1 }
            return count
        }
        let consumed = Recorder<Tick>()
        let busy = Task {
            for await tick in engine.ticks(every: .milliseconds(1)) { consumed.append(tick) }
        }
        #expect(await eventually { consumed.count >= 3 && engine.counters.armed == 2 })
        await engine.shutdown()
        #expect(await waiting.value == 0)
        await busy.value
    }

    /// A backend of the user's may number its firings any way at all: a sequence that repeats,
    /// goes back or jumps to the end counts as skipping nothing or as much as fits, and ticks
    /// merged while the consumer is away add up without overflowing.
    @Test(.timeLimit(.minutes(1)), arguments: [[0, 0, 0, 0], [5, 2, 1, 0], [UInt64.max, UInt64.max, 0, UInt64.max]])
    func absurdSequencesFromABackendMergeWithoutTrapping(sequences: [UInt64]) async throws {
        let backend = RenumberingBackend(sequences)
        var iterator = SafeDispatchTimer.Backend.custom(backend).ticks(every: .seconds(1)).makeAsyncIterator()
        backend.timeline.advance(by: .seconds(1))
        let first = try #require(await iterator.next())
        // Three firings while nobody waits: one tick, standing for them all.
        backend.timeline.advance(by: .seconds(3))
        let merged = try #require(await iterator.next())
        #expect(first.missed == Int(clamping: sequences[0]))
        #expect(merged.sequence == sequences[3])
        #expect(merged.missed >= 2, "two merged ticks count as skipped")
        #expect(merged.scheduled == TimerInstant(nanoseconds: 0).advanced(by: .seconds(4)))
    }

    @Test(.timeLimit(.minutes(1)))
    func invalidIntervalOrStoppedEngineGivesEmptySequence() async throws {
        var count = 0
        for await _ in self.engine.ticks(every: .zero) { count += 1 }
        let stopped = try makeEngine()
        await stopped.shutdown()
        for await _ in stopped.ticks(every: .milliseconds(1)) { count += 1 }
        #expect(count == 0)
        #expect(self.engine.counters.armed == 0)
    }
}

/// A virtual timeline whose firings carry the given sequence numbers, in turn.
private final class RenumberingBackend: TimerBackend {
    let timeline = ManualTimeline()
    private let sequences: [UInt64]
    private let fired = Atomic<Int>(0)

    init(_ sequences: [UInt64]) {
        self.sequences = sequences
    }

    func now(_ clock: TimerClock) -> Int64 {
        self.timeline.now(clock)
    }

    func arm(
        _ schedule: TimerSchedule, clock: TimerClock, queue: DispatchQueue?, fire: @escaping @Sendable (Tick) -> Void
    ) -> (any ArmedTimer)? {
        self.timeline.arm(schedule, clock: clock, queue: queue) { [self] tick in
            var tick = tick
            let index = self.fired.add(1, ordering: .relaxed).oldValue
            tick.sequence = self.sequences[min(index, self.sequences.count - 1)]
            fire(tick)
        }
    }
}
