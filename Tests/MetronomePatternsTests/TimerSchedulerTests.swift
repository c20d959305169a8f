import Foundation
import Metronome
import Testing

/// Records every delegate call.
final class SchedulerDelegate: TimerSchedulerDelegate {
    let events = Recorder<TimerScheduler.Event>()

    func executed(_ id: TimerScheduler.TimerID, willRepeat: Bool) {
        self.events.append(.executed(id, willRepeat: willRepeat))
    }

    func cancelled(_ id: TimerScheduler.TimerID) {
        self.events.append(.cancelled(id))
    }
}

@Suite(.serialized)
struct TimerSchedulerTests: EngineSuite {
    let engine: TimerEngine

    @Test(.timeLimit(.minutes(1)))
    func oneShotExecutesOnceAndLaterCancelIsANoOp() async throws {
        let scheduler = TimerScheduler(backend: .engine(self.engine))
        var events = scheduler.events.makeAsyncIterator()
        let start = TimerClock.monotonic.now()
        let id = scheduler.schedule(after: .milliseconds(2))
        #expect(await events.next() == .executed(id, willRepeat: false))
        #expect(TimerClock.monotonic.now() >= start.advanced(by: .milliseconds(2)))
        #expect(!scheduler.cancel(id))
        #expect(scheduler.activeTimers.isEmpty)
        // A marker proves nothing was queued between the execution and it.
        let marker = scheduler.schedule(after: .zero)
        #expect(await events.next() == .executed(marker, willRepeat: false))
        #expect(self.engine.counters.armed == 0)
    }

    @Test(.timeLimit(.minutes(1)))
    func doubleCancelSendsOneCancelledEvent() async throws {
        let scheduler = TimerScheduler(backend: .engine(self.engine))
        let delegate = SchedulerDelegate()
        scheduler.setDelegate(delegate)
        var events = scheduler.events.makeAsyncIterator()
        let id = scheduler.schedule(after: .seconds(10))
        #expect(self.engine.counters.armed == 1)
        #expect(scheduler.cancel(id))
        #expect(!scheduler.cancel(id))
        #expect(scheduler.cancel([id, id]) == 0)
        #expect(self.engine.counters.armed == 0)
        let marker = scheduler.schedule(after: .zero)
        #expect(await events.next() == .cancelled(id))
        #expect(await events.next() == .executed(marker, willRepeat: false))
        #expect(delegate.events.wait(forCount: 2, timeout: .seconds(5)))
        #expect(delegate.events.entries == [.cancelled(id), .executed(marker, willRepeat: false)])
    }

    /// The sequence given to `cancel(_:)` is read before the scheduler takes its lock, so
    /// a lazy one that asks the scheduler itself (here, which timers are active) works
    /// instead of deadlocking on that lock. Run on a thread of its own, so a deadlock
    /// fails the test instead of hanging it.
    @Test(.timeLimit(.minutes(1)))
    func cancelReadsALazySequenceThatAsksTheSchedulerBeforeLocking() throws {
        let scheduler = TimerScheduler(backend: .engine(self.engine))
        let ids = [scheduler.schedule(after: .seconds(10)), scheduler.schedule(after: .seconds(10))]
        let done = Gate()
        let cancelled = Recorder<Int>()
        let thread = try PosixThread.spawn {
            cancelled.append(scheduler.cancel(ids.lazy.filter { scheduler.activeTimers.contains($0) }))
            done.open()
        }
        try #require(done.pass(timeout: .seconds(10)), "cancel(_:) deadlocked on a sequence that reads the scheduler")
        thread.join()
        #expect(cancelled.entries == [2])
        #expect(scheduler.activeTimers.isEmpty)
    }

    @Test(.timeLimit(.minutes(1)))
    func repeatingExecutesUntilCancelled() async throws {
        let scheduler = TimerScheduler(backend: .engine(self.engine))
        var events = scheduler.events.makeAsyncIterator()
        let id = scheduler.schedule(after: .milliseconds(1), every: .milliseconds(2))
        for _ in 0..<10 {
            #expect(await events.next() == .executed(id, willRepeat: true))
        }
        #expect(scheduler.cancel(id))
        #expect(self.engine.counters.armed == 0)
        // Executions decided before the cancel may still be queued; then the cancel, then nothing.
        var next = await events.next()
        while next == .executed(id, willRepeat: true) { next = await events.next() }
        #expect(next == .cancelled(id))
        let marker = scheduler.schedule(after: .milliseconds(10))
        #expect(await events.next() == .executed(marker, willRepeat: false))
    }

    @Test(.timeLimit(.minutes(1)))
    func concurrentCancelsGiveExactlyOneEventPerOneShot() async throws {
        for _ in 0..<3 {
            let scheduler = TimerScheduler(backend: .engine(self.engine))
            let delegate = SchedulerDelegate()
            scheduler.setDelegate(delegate)
            let ids = (0..<1000).map { _ in
                scheduler.schedule(after: .microseconds(Int.random(in: 0...3000)))
            }
            let successes = Recorder<Int>()
            // Eight threads each cancel an overlapping half of the timers while they fire.
            DispatchQueue.concurrentPerform(iterations: 8) { thread in
                var mine = ids.enumerated().filter { ($0.offset + thread) % 2 == 0 }.map(\.element)
                mine.shuffle()
                for chunk in stride(from: 0, to: mine.count, by: 50) {
                    let part = mine[chunk..<min(chunk + 50, mine.count)]
                    let cancelled =
                        thread % 3 == 0
                        ? scheduler.cancel(part)
                        : part.reduce(0) { $0 + (scheduler.cancel($1) ? 1 : 0) }
                    successes.append(cancelled)
                    spin(for: .microseconds(20))
                }
            }
            #expect(delegate.events.wait(forCount: 1000, timeout: .seconds(10)))
            // A probe due after every deadline (3 ms at most) delivers its event: events
            // arrive in the order they were decided, so a wrong extra one would come first.
            let probe = scheduler.schedule(after: .milliseconds(4))
            #expect(
                await eventually(timeout: .seconds(10)) {
                    delegate.events.entries.contains(.executed(probe, willRepeat: false))
                })
            let events = delegate.events.entries.filter { $0.id != probe }
            var perID: [TimerScheduler.TimerID: [TimerScheduler.Event]] = [:]
            for event in events { perID[event.id, default: []].append(event) }
            #expect(events.count == 1000)
            #expect(perID.count == 1000)
            #expect(perID.values.allSatisfy { $0.count == 1 })
            let cancelledCount = events.filter { if case .cancelled = $0 { true } else { false } }.count
            #expect(cancelledCount == successes.entries.reduce(0, +))
            #expect(!events.contains(.executed(ids[0], willRepeat: true)))
            #expect(scheduler.activeTimers.isEmpty)
            #expect(await eventually { self.engine.counters.armed == 0 })
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func stoppedEngineAndBadPeriodReportCancelled() async throws {
        let stopped = try makeEngine()
        await stopped.shutdown()
        let scheduler = TimerScheduler(backend: .engine(stopped))
        var events = scheduler.events.makeAsyncIterator()
        let id = scheduler.schedule(after: .milliseconds(1))
        #expect(await events.next() == .cancelled(id))
        let other = TimerScheduler(backend: .engine(self.engine))
        var otherEvents = other.events.makeAsyncIterator()
        let bad = other.schedule(after: .milliseconds(1), every: .zero)
        #expect(await otherEvents.next() == .cancelled(bad))
        #expect(self.engine.counters.armed == 0)
    }

    /// Timers still active when their engine shuts down are cancelled by it, each with one
    /// `.cancelled` event, and leave ``TimerScheduler/activeTimers``.
    @Test(.timeLimit(.minutes(1)))
    func aShutdownCancelsTheActiveTimers() async throws {
        let engine = try makeEngine()
        let scheduler = TimerScheduler(backend: .engine(engine))
        var events = scheduler.events.makeAsyncIterator()
        let fired = scheduler.schedule(after: .zero)
        #expect(await events.next() == .executed(fired, willRepeat: false))
        let active = [
            scheduler.schedule(after: .seconds(3600)),
            scheduler.schedule(after: .seconds(3600), every: .seconds(1)),
        ]
        #expect(scheduler.activeTimers == Set(active))
        await engine.shutdown()
        #expect(scheduler.activeTimers.isEmpty)
        var cancelled: [TimerScheduler.TimerID] = []
        for _ in active {
            guard case .cancelled(let id)? = await events.next() else { break }
            cancelled.append(id)
        }
        #expect(cancelled.sorted() == active)
        #expect(!scheduler.cancel(active[0]), "a timer cancelled by the shutdown was active")
    }

    /// Timers scheduled from three threads while a fourth shuts the engine down: each
    /// gets exactly one `.cancelled` event, whether refused or stopped, and none stays
    /// active.
    @Test(.timeLimit(.minutes(1)))
    func schedulesRacingAShutdownAreEachCancelledOnce() async throws {
        let engine = try makeEngine()
        let scheduler = TimerScheduler(backend: .engine(engine))
        var events = scheduler.events.makeAsyncIterator()
        let scheduled = Recorder<TimerScheduler.TimerID>()
        DispatchQueue.concurrentPerform(iterations: 4) { worker in
            guard worker > 0 else {
                usleep(500)
                engine.syncShutdown()
                return
            }
            for _ in 0..<500 { scheduled.append(scheduler.schedule(after: .seconds(3600))) }
        }
        #expect(scheduler.activeTimers.isEmpty)
        var cancelled: [TimerScheduler.TimerID] = []
        for _ in 0..<scheduled.count {
            guard case .cancelled(let id)? = await events.next() else { break }
            cancelled.append(id)
        }
        #expect(cancelled.sorted() == scheduled.entries.sorted())
    }

    @Test(.timeLimit(.minutes(1)))
    func delegateIsHeldWeaklyAndEventsUseTheGivenQueue() async throws {
        let queue = DispatchQueue(label: "delivery")
        let key = DispatchSpecificKey<Int>()
        queue.setSpecific(key: key, value: 42)
        let scheduler = TimerScheduler(backend: .engine(self.engine), queue: queue)
        final class QueueCheck: TimerSchedulerDelegate {
            let onQueue = Recorder<Bool>()
            let key: DispatchSpecificKey<Int>
            init(key: DispatchSpecificKey<Int>) { self.key = key }
            func executed(_ id: TimerScheduler.TimerID, willRepeat: Bool) {
                self.onQueue.append(DispatchQueue.getSpecific(key: self.key) == 42)
            }
            func cancelled(_ id: TimerScheduler.TimerID) {}
        }
        let check = QueueCheck(key: key)
        scheduler.setDelegate(check)
        scheduler.schedule(after: .zero)
        #expect(check.onQueue.wait(forCount: 1, timeout: .seconds(5)))
        #expect(check.onQueue.entries == [true])
        weak var weakDelegate: SchedulerDelegate?
        do {
            let delegate = SchedulerDelegate()
            weakDelegate = delegate
            scheduler.setDelegate(delegate)
        }
        #expect(weakDelegate == nil)
        var events = scheduler.events.makeAsyncIterator()
        let id = scheduler.schedule(after: .zero)
        #expect(await events.next() == .executed(id, willRepeat: false))
    }
}
