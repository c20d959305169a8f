@preconcurrency import Dispatch
import Synchronization

/// Raw GCD: one `DispatchSourceTimer` per timer, all on one serial queue.
///
/// This is what Swift code on Linux uses today, measured without any wrapper. Each source is
/// scheduled once on the absolute schedule and activated; a handler derives the deadline it
/// fired for from its own firing count, and `source.data` tells how many firings GCD merged into
/// this one (the rest are counted as missed). Sources are torn down with `cancel()` only: they
/// are never suspended, so releasing them is always safe (libdispatch traps when a suspended
/// source is released).
///
/// On Linux, libdispatch arms one timerfd per clock and ignores leeway
/// (`_dispatch_timeout_program` marks it unused), so leeway changes nothing here. GCD cannot
/// count its own wake-ups; runners fall back to ``VoluntaryWakeups``.
public struct DispatchSubject: JitterSubject {
    /// `"gcd"`.
    public let name = "gcd"

    /// Creates the subject.
    public init() {}

    /// Runs one repeating dispatch source per timer on a serial queue until `recorder` is complete.
    ///
    /// - Throws: ``MeasurementError/timedOut(backend:recorded:expected:)`` if the recorder does
    ///   not complete in time.
    public func run(_ config: JitterConfiguration, recorder: LatencyRecorder) throws -> SubjectCounters {
        let queue = DispatchQueue(label: "metronome.measurements.gcd.jitter")
        let start = config.start()
        let sources = SourceGroup()
        for timer in 0..<config.timers {
            let source = sources.make(queue: queue)
            let ticks = Atomic<Int64>(0)
            source.setEventHandler {
                let fired = MonotonicTime.now()
                let merged = Int64(source.data)
                // The queue is serial, so no other handler of this source races the update.
                let tick = ticks.load(ordering: .relaxed)
                ticks.store(tick + merged, ordering: .relaxed)
                recorder.record(
                    scheduledNanoseconds: config.deadline(timer: timer, tick: tick, start: start),
                    firedNanoseconds: fired,
                    missed: Int(merged) - 1
                )
                MonotonicTime.spin(nanoseconds: config.handlerWorkNanoseconds)
            }
            source.schedule(
                deadline: DispatchTime(uptimeNanoseconds: UInt64(config.deadline(timer: timer, tick: 0, start: start))),
                repeating: .nanoseconds(Int(config.intervalNanoseconds)),
                leeway: .nanoseconds(Int(config.leewayNanoseconds))
            )
            source.activate()
        }
        let completed = recorder.waitUntilComplete(timeout: config.completionTimeout)
        sources.cancelAll()
        guard completed else {
            throw MeasurementError.timedOut(
                backend: self.name,
                recorded: recorder.summary.samples,
                expected: recorder.target
            )
        }
        return SubjectCounters(wakeups: nil, note: Self.leewayNote(config.leewayNanoseconds))
    }

    static func leewayNote(_ leewayNanoseconds: Int64) -> String? {
        guard leewayNanoseconds > 0 else { return nil }
        return "gcd: libdispatch on Linux ignores leeway (one timerfd per clock, leeway unused)"
    }
}

extension DispatchSubject {
    /// Dispatch sources created for one run, cancelled together.
    final class SourceGroup {
        private var sources: [any DispatchSourceTimer] = []
        private let cancelled = DispatchGroup()

        /// A new timer source on `queue` whose cancellation this group waits for.
        func make(queue: DispatchQueue) -> any DispatchSourceTimer {
            let source = DispatchSource.makeTimerSource(queue: queue)
            // Set before activation: handlers set later are installed asynchronously.
            self.cancelled.enter()
            source.setCancelHandler { [cancelled] in cancelled.leave() }
            self.sources.append(source)
            return source
        }

        /// Cancels every source and returns once no handler is running or will run.
        ///
        /// The cancel handler runs on the source's queue after its last event handler, so
        /// waiting for all of them means every handler has finished.
        func cancelAll() {
            for source in self.sources {
                source.cancel()
                // Each event handler captures its own source; dropping it breaks the cycle.
                source.setEventHandler(handler: nil)
            }
            self.cancelled.wait()
            self.sources = []
        }
    }
}
