import Dispatch
import Metronome
import MetronomeTesting
import Synchronization
import Testing

/// The path every backend shares, driven through a backend that misbehaves in the ways a
/// real one can: refusing to arm, or firing after a disarm.
@Suite
final class FaultyBackendTests: Sendable {
    /// A `ManualTimeline` with faults switched on by the test.
    final class FaultyBackend: TimerBackend {
        let timeline = ManualTimeline()
        /// `arm` refuses, as an engine that was shut down does.
        let refuses = Atomic<Bool>(false)
        /// `disarm` does nothing, so old armings keep firing.
        let ignoresDisarm = Atomic<Bool>(false)

        func now(_ clock: TimerClock) -> Int64 {
            self.timeline.now(clock)
        }

        func arm(
            _ schedule: TimerSchedule, clock: TimerClock, queue: DispatchQueue?,
            fire: @escaping @Sendable (Tick) -> Void
        ) -> (any ArmedTimer)? {
            guard !self.refuses.load(ordering: .relaxed) else { return nil }
            guard let armed = self.timeline.arm(schedule, clock: clock, queue: queue, fire: fire) else { return nil }
            return Disarm(armed: armed, backend: self)
        }

        struct Disarm: ArmedTimer {
            let armed: any ArmedTimer
            let backend: FaultyBackend

            func disarm() {
                if !self.backend.ignoresDisarm.load(ordering: .relaxed) { self.armed.disarm() }
            }
        }
    }

    let backend = FaultyBackend()
    let fired = Atomic<Int>(0)

    func makeTimer() -> SafeDispatchTimer {
        SafeDispatchTimer(backend: .custom(self.backend))
    }

    func schedule(_ timer: SafeDispatchTimer, after delay: Duration, every period: Duration? = nil) -> Bool {
        timer.schedule(after: delay, every: period) { _ in self.fired.add(1, ordering: .relaxed) }
    }

    @Test func aRefusedScheduleDoesNothing() {
        self.backend.refuses.store(true, ordering: .relaxed)
        let idle = self.makeTimer()
        #expect(!self.schedule(idle, after: .seconds(1)))
        #expect(idle.state == .idle)

        let cancelled = self.makeTimer()
        self.backend.refuses.store(false, ordering: .relaxed)
        #expect(self.schedule(cancelled, after: .seconds(1)))
        #expect(cancelled.cancel())
        self.backend.refuses.store(true, ordering: .relaxed)
        #expect(!self.schedule(cancelled, after: .seconds(1)))
        #expect(cancelled.state == .cancelled)
        #expect(self.backend.timeline.armedCount == 0)
    }

    /// The previous arming is already disarmed when the new one is refused: the timer
    /// cannot keep running, so it ends cancelled.
    @Test func aRefusedRescheduleOrResumeCancels() {
        let rescheduled = self.makeTimer()
        let resumed = self.makeTimer()
        #expect(self.schedule(rescheduled, after: .seconds(1)))
        #expect(self.schedule(resumed, after: .seconds(1)))
        #expect(resumed.suspend())
        self.backend.refuses.store(true, ordering: .relaxed)
        #expect(!rescheduled.reschedule(after: .seconds(2)))
        #expect(!resumed.resume())
        #expect(rescheduled.state == .cancelled)
        #expect(resumed.state == .cancelled)
        #expect(self.backend.timeline.armedCount == 0)
        self.backend.timeline.advance(by: .seconds(5))
        #expect(self.fired.load(ordering: .relaxed) == 0)
    }

    /// Firings of an arming the timer replaced or stopped are dropped by the timer itself,
    /// whatever the backend still delivers.
    @Test func firingsOfAReplacedArmingAreDropped() {
        self.backend.ignoresDisarm.store(true, ordering: .relaxed)
        let timer = self.makeTimer()
        #expect(self.schedule(timer, after: .seconds(1), every: .seconds(1)))
        #expect(timer.reschedule(after: .seconds(10), every: .seconds(10)))
        self.backend.timeline.advance(by: .seconds(5))
        #expect(self.fired.load(ordering: .relaxed) == 0, "a replaced arming ran the handler")
        self.backend.timeline.advance(by: .seconds(5))
        #expect(self.fired.load(ordering: .relaxed) == 1)

        #expect(timer.cancel())
        self.backend.timeline.advance(by: .seconds(60))
        #expect(self.fired.load(ordering: .relaxed) == 1, "a cancelled arming ran the handler")
    }

    // MARK: ExpiringValue, whose set arms each expiry on the backend itself

    func makeValue(lifetime: Duration) -> ExpiringValue<String> {
        ExpiringValue("session", lifetime: lifetime, backend: .custom(self.backend)) { _ in
            self.fired.add(1, ordering: .relaxed)
        }
    }

    /// A re-arm the backend refuses leaves the value without a timer, as on an engine shut
    /// down: it lives, touchable, until it is ended, and nothing stays armed.
    @Test func aRefusedRearmLeavesTheValueUntilEnded() {
        let value = self.makeValue(lifetime: .seconds(10))
        self.backend.timeline.advance(by: .seconds(5))
        #expect(value.touch())
        self.backend.refuses.store(true, ordering: .relaxed)
        self.backend.timeline.advance(by: .seconds(5))
        #expect(self.backend.timeline.armedCount == 0)
        self.backend.timeline.advance(by: .seconds(60))
        #expect(value.touch())
        #expect(value.value == "session")
        #expect(value.invalidate() == "session")
        #expect(self.fired.load(ordering: .relaxed) == 0)
    }

    /// Armings whose disarm did nothing keep firing: a value drops them as stale, so it
    /// re-arms once per firing of its current arming, ends once, and nothing fires for it
    /// after an invalidation.
    @Test func firingsOfDisarmedArmingsAreDropped() {
        self.backend.ignoresDisarm.store(true, ordering: .relaxed)
        let expiring = self.makeValue(lifetime: .seconds(1))
        let invalidated = self.makeValue(lifetime: .seconds(1))
        for _ in 0..<5 {
            self.backend.timeline.advance(by: .milliseconds(500))
            #expect(expiring.touch())
            #expect(invalidated.touch())
        }
        #expect(invalidated.invalidate() == "session")
        self.backend.timeline.advance(by: .seconds(60))
        #expect(expiring.isExpired)
        #expect(self.fired.load(ordering: .relaxed) == 1)
    }
}
