@preconcurrency import Dispatch
import Foundation
import Metronome
import MetronomeTestSupport
import Testing

/// The `Tick` contract that `metronome stress` checks, in one deterministic scenario per
/// backend: a repeating timer whose handler blocks for 2.5 periods once.
///
/// `Tick` documents `scheduled` as the latest deadline a firing covers, `missed` as the
/// deadlines skipped before it (their windows had closed), and each tick's sequence as the
/// previous one's `sequence + missed + 1`. With leeway 0 that means `0 ≤ lateness ≤ period`,
/// `lateness > 0` when anything was skipped, and no tick's `scheduled` is after the moment its
/// handler runs.
@Suite(.serialized)
struct TickContractTests {
    enum Backend: String, CaseIterable, CustomTestStringConvertible, Sendable {
        case engine, dispatch
        var testDescription: String { self.rawValue }
    }

    @Test(.timeLimit(.minutes(2)), arguments: Backend.allCases)
    func lateRepeatingTicksFollowTheTickContract(backend: Backend) throws {
        let engine = try TimerEngine()
        let timer = SafeDispatchTimer(backend: backend == .engine ? .engine(engine) : .dispatch)
        let period: Int64 = 4_000_000
        let recorded = LockedCondition<[(Tick, TimerInstant)]>([])
        let done = DispatchSemaphore(value: 0)
        #expect(
            timer.schedule(
                deadline: .now() + .milliseconds(2), repeating: .nanoseconds(Int(period)), leeway: .nanoseconds(0)
            ) { tick in
                let now = TimerClock.monotonic.now()
                let count = recorded.withLock { samples in
                    samples.append((tick, now))
                    return samples.count
                }
                if count == 2 { usleep(10_000) }  // 2.5 periods
                if count == 8 { done.signal() }
            })
        #expect(done.wait(timeout: .now() + 10) == .success)
        timer.cancelAndWait()
        let samples = recorded.withLock { $0 }
        var previous: Tick?
        for (tick, now) in samples {
            let lateness = tick.fired.nanoseconds - tick.scheduled.nanoseconds
            #expect(now >= tick.scheduled, "handler ran before tick.scheduled: \(tick), now \(now)")
            #expect(
                lateness >= 0 && lateness <= period && (tick.missed == 0 || lateness > 0),
                "missed \(tick.missed) for lateness \(lateness) ns (period \(period) ns): \(tick)")
            if let previous {
                #expect(
                    tick.sequence == previous.sequence + UInt64(tick.missed) + 1,
                    "sequence \(previous.sequence) → \(tick.sequence) (missed \(tick.missed))")
            }
            previous = tick
        }
        #expect(samples.contains { $0.0.missed > 0 }, "the blocked handler made no tick late: \(samples.map(\.0))")
    }
}
