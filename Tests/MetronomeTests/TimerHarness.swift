@preconcurrency import Dispatch
import Foundation
@_exported import MetronomeTestSupport
import MetronomeTesting
import Synchronization
import Testing

@testable import Metronome

extension Tag {
    /// Tests that wait on real time: serialized, time-limited, and the first to blame when
    /// the machine is loaded.
    @Tag static var realTime: Self
}

// MARK: - Harnesses

/// Which backend a harness drives; the argument of every `@Test(arguments:)` that runs one
/// behaviour body on several backends (NIO `NIOScheduledCallbackTests` style).
enum HarnessKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// `ManualTimeline`: virtual time, `advance(by:)` fires synchronously.
    case manual
    /// A fresh `TimerEngine` per test, shut down at the end.
    case engine
    /// The same with four shards: each thread's timers in a shard of its own.
    case shardedEngine = "sharded-engine"
    /// GCD `DispatchSourceTimer`.
    case dispatch

    static let real: [HarnessKind] = [.engine, .shardedEngine, .dispatch]

    var testDescription: String { self.rawValue }

    func make() throws -> any TimerHarness {
        switch self {
        case .manual: ManualHarness()
        case .engine: try EngineHarness()
        case .shardedEngine: try EngineHarness(configuration: .init(shards: 4))
        case .dispatch: DispatchHarness()
        }
    }
}

extension HarnessKind {
    /// What most behaviour bodies start from: a harness of this kind, a recorder on its
    /// clock, and a timer on `queue`. The caller tears the harness down.
    func makeRecordedTimer(
        queue: DispatchQueue? = nil
    ) throws -> (harness: any TimerHarness, recorder: TickRecorder, timer: SafeDispatchTimer) {
        let harness = try self.make()
        return (harness, TickRecorder(harness), harness.makeTimer(queue: queue))
    }
}

/// One way of making timers and letting time pass, so that a behaviour body runs unchanged on
/// virtual and on real time.
protocol TimerHarness: Sendable {
    var kind: HarnessKind { get }

    /// Whether time only moves in `advance(by:)` / `wait(...)`.
    var isVirtual: Bool { get }

    /// Now, on the clock the timers' deadlines and ticks use.
    var now: TimerInstant { get }

    /// What a handler reads as "now" when it wants to check it was not woken early.
    func handlerClock() -> TimerInstant

    func makeTimer(queue: DispatchQueue?) -> SafeDispatchTimer

    /// Lets `duration` pass. Virtual: advances and fires due timers on this thread. Real:
    /// sleeps, so use it only to check that something does *not* happen.
    func advance(by duration: Duration)

    /// Waits until `predicate` holds or `timeout` passes; `notifier` is what handlers poke
    /// when they change what `predicate` reads. Virtual time advances in `step`s.
    func wait(
        for notifier: Notifier,
        timeout: Duration,
        step: Duration,
        until predicate: () -> Bool
    ) -> Bool

    /// Timers the backend has armed now, where the backend can tell.
    var armedCount: Int? { get }

    /// Leave the backend running even at tear-down (a test saw a handler stuck for ever, and
    /// shutting the engine down would wait for it).
    func abandon()

    func tearDown()
}

extension TimerHarness {
    func makeTimer() -> SafeDispatchTimer {
        self.makeTimer(queue: nil)
    }

    func wait(for notifier: Notifier, timeout: Duration = .seconds(5), until predicate: () -> Bool) -> Bool {
        self.wait(for: notifier, timeout: timeout, step: .milliseconds(1), until: predicate)
    }

    /// Waits for `recorder` to hold at least `count` records.
    func wait(for recorder: TickRecorder, count: Int, timeout: Duration = .seconds(5)) -> Bool {
        self.wait(for: recorder.notifier, timeout: timeout) { recorder.count >= count }
    }

    /// Waits for `gate` to open: in virtual time by advancing, in real time on its condition.
    func wait(for gate: Gate, timeout: Duration = .seconds(5)) -> Bool {
        self.wait(for: gate.notifier, timeout: timeout) { gate.opened }
    }

    /// Waits until `predicate` holds, for state nobody notifies about (such as the engine's
    /// counters): virtual time advances, real time re-checks every millisecond.
    func eventually(timeout: Duration = .seconds(2), _ predicate: () -> Bool) -> Bool {
        if self.isVirtual {
            return self.wait(for: Notifier(), timeout: timeout, step: .milliseconds(1), until: predicate)
        }
        return Notifier().poll(timeout: timeout, every: .milliseconds(1), until: predicate)
    }

    /// A `DispatchTime` `offset` from the harness's now (virtual time for the manual harness).
    func deadline(after offset: Duration) -> DispatchTime {
        DispatchTime(uptimeNanoseconds: UInt64(self.now.advanced(by: offset).nanoseconds))
    }
}

// MARK: - Rejected schedules

extension HarnessKind {
    /// Runs `refuse` on a harness of this kind; every schedule call it makes must be refused.
    /// The timers it returns are kept to the end, so that one armed by mistake is still there
    /// to fire: nothing is armed and, `time` later, nothing has fired.
    func expectRefusedSchedulesDoNothing(
        within time: Duration,
        sourceLocation: SourceLocation = #_sourceLocation,
        _ refuse: (any TimerHarness, TickRecorder) -> [SafeDispatchTimer]
    ) throws {
        let harness = try self.make()
        defer { harness.tearDown() }
        let recorder = TickRecorder(harness)
        withExtendedLifetime(refuse(harness, recorder)) {
            if let armed = harness.armedCount {
                #expect(armed == 0, "a rejected schedule armed something", sourceLocation: sourceLocation)
            }
            harness.advance(by: time)
            #expect(recorder.count == 0, "a rejected schedule fired", sourceLocation: sourceLocation)
        }
    }
}

extension TimerHarness {
    /// Tries `schedule`, a call the timer must refuse, on a fresh idle timer and on a
    /// cancelled one: each refuses it and keeps its state. Returns the two timers, for
    /// ``HarnessKind/expectRefusedSchedulesDoNothing(within:sourceLocation:_:)`` to keep.
    func expectRefused(
        _ name: String,
        recorder: TickRecorder,
        sourceLocation: SourceLocation = #_sourceLocation,
        by schedule: (SafeDispatchTimer) -> Bool
    ) -> [SafeDispatchTimer] {
        let idle = self.makeTimer()
        #expect(!schedule(idle), "\(name) accepted", sourceLocation: sourceLocation)
        #expect(idle.state == .idle, "\(name) changed the state", sourceLocation: sourceLocation)

        let cancelled = self.makeTimer()
        #expect(
            cancelled.schedule(deadline: self.deadline(after: .seconds(3600)), handler: recorder.handler),
            sourceLocation: sourceLocation)
        #expect(cancelled.cancel(), sourceLocation: sourceLocation)
        #expect(!schedule(cancelled), "\(name) accepted", sourceLocation: sourceLocation)
        #expect(cancelled.state == .cancelled, sourceLocation: sourceLocation)
        return [idle, cancelled]
    }
}

/// Virtual time: `ManualTimeline` as the backend, every clock reads the timeline.
final class ManualHarness: TimerHarness {
    /// Far from zero, so that negative offsets and `DispatchTime(uptimeNanoseconds: 0)`'s
    /// special meaning never come into play.
    static let origin = TimerInstant(nanoseconds: 1_000_000_000_000)

    let timeline = ManualTimeline(startingAt: ManualHarness.origin)
    var kind: HarnessKind { .manual }
    var isVirtual: Bool { true }
    var now: TimerInstant { self.timeline.now }
    var armedCount: Int? { self.timeline.armedCount }

    func handlerClock() -> TimerInstant { self.timeline.now }

    func makeTimer(queue: DispatchQueue?) -> SafeDispatchTimer {
        SafeDispatchTimer(queue: queue, backend: .custom(self.timeline))
    }

    func advance(by duration: Duration) {
        self.timeline.advance(by: duration)
    }

    func wait(for notifier: Notifier, timeout: Duration, step: Duration, until predicate: () -> Bool) -> Bool {
        let end = self.now.advanced(by: timeout)
        while !predicate() {
            guard self.now < end else { return false }
            self.timeline.advance(by: step)
        }
        return true
    }

    func abandon() {}
    func tearDown() {}
}

/// Real time on a fresh `TimerEngine`.
final class EngineHarness: TimerHarness {
    let engine: TimerEngine
    private let abandoned = Atomic<Bool>(false)

    init(configuration: TimerEngine.Configuration = .init()) throws {
        self.engine = try TimerEngine(configuration: configuration)
    }

    var kind: HarnessKind { self.engine.configuration.shards > 1 ? .shardedEngine : .engine }
    var isVirtual: Bool { false }
    var now: TimerInstant { TimerClock.monotonic.now() }
    var armedCount: Int? { Int(self.engine.counters.armed) }

    func handlerClock() -> TimerInstant { TimerClock.monotonic.now() }

    func makeTimer(queue: DispatchQueue?) -> SafeDispatchTimer {
        SafeDispatchTimer(queue: queue, backend: .engine(self.engine))
    }

    func advance(by duration: Duration) {
        realSleep(duration)
    }

    func wait(for notifier: Notifier, timeout: Duration, step: Duration, until predicate: () -> Bool) -> Bool {
        notifier.wait(timeout: timeout, until: predicate)
    }

    func abandon() {
        self.abandoned.store(true, ordering: .relaxed)
    }

    func tearDown() {
        if !self.abandoned.load(ordering: .relaxed) {
            self.engine.syncShutdown()
        }
    }
}

/// Real time on GCD.
final class DispatchHarness: TimerHarness {
    var kind: HarnessKind { .dispatch }
    var isVirtual: Bool { false }
    var now: TimerInstant { TimerClock.monotonic.now() }
    var armedCount: Int? { nil }

    func handlerClock() -> TimerInstant { TimerClock.monotonic.now() }

    func makeTimer(queue: DispatchQueue?) -> SafeDispatchTimer {
        SafeDispatchTimer(queue: queue, backend: .dispatch)
    }

    func advance(by duration: Duration) {
        realSleep(duration)
    }

    func wait(for notifier: Notifier, timeout: Duration, step: Duration, until predicate: () -> Bool) -> Bool {
        notifier.wait(timeout: timeout, until: predicate)
    }

    func abandon() {}
    func tearDown() {}
}

/// A bounded real-time sleep: only for checking that something does *not* happen.
func realSleep(_ duration: Duration) {
    MonotonicTime.sleep(for: duration)
}

// MARK: - Synchronisation helpers

/// A condition variable to wait on with a timeout; handlers call ``notify()`` after each
/// change that a waiter may be looking for.
final class Notifier: Sendable {
    private let condition = LockedCondition(())

    /// Takes the lock before waking, so a `notify()` cannot slip between a waiter's check of
    /// its predicate and its wait.
    func notify() {
        self.condition.update { _ in }
    }

    /// Waits until `predicate` holds (checked under the condition's lock) or `timeout` passes.
    func wait(timeout: Duration, until predicate: () -> Bool) -> Bool {
        self.condition.wait(timeout: timeout) { _ in predicate() }
    }
}

extension Notifier {
    /// Waits until `predicate` holds, re-checking every `interval` as well as on each
    /// `notify()`, or until `timeout` passes.
    func poll(timeout: Duration, every interval: Duration, until predicate: () -> Bool) -> Bool {
        let end = ContinuousClock.now.advanced(by: timeout)
        while !predicate() {
            let now = ContinuousClock.now
            guard now < end else { return false }
            _ = self.wait(timeout: min(interval, now.duration(to: end))) { predicate() }
        }
        return true
    }
}

/// A one-way gate: closed until ``open()``; ``wait(timeout:)`` returns whether it opened.
final class Gate: @unchecked Sendable {
    let notifier = Notifier()
    private let isOpen = Atomic<Bool>(false)

    var opened: Bool { self.isOpen.load(ordering: .acquiring) }

    func open() {
        self.isOpen.store(true, ordering: .releasing)
        self.notifier.notify()
    }

    @discardableResult
    func wait(timeout: Duration = .seconds(5)) -> Bool {
        self.notifier.wait(timeout: timeout) { self.opened }
    }
}

/// A value behind a lock, for test bookkeeping: the shared lock box.
typealias Locked<Value> = LockedCondition<Value>

extension LockedCondition {
    var current: Value { self.withLock { $0 } }
}

/// A weak reference that a handler can capture: the timer must not keep itself alive
/// through its own handler.
final class WeakTimer: @unchecked Sendable {
    private let lock = NSLock()
    private weak var stored: SafeDispatchTimer?

    init(_ timer: SafeDispatchTimer? = nil) {
        self.stored = timer
    }

    var timer: SafeDispatchTimer? {
        get { self.lock.withLock { self.stored } }
        set { self.lock.withLock { self.stored = newValue } }
    }
}

/// A strong reference that a handler can drop, to release the last reference from inside.
final class TimerHolder: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: SafeDispatchTimer?

    init(_ timer: SafeDispatchTimer?) {
        self.stored = timer
    }

    var timer: SafeDispatchTimer? {
        self.lock.withLock { self.stored }
    }

    /// Drops the reference outside the lock, so the timer's deinit never runs under it.
    func drop() {
        let timer = self.lock.withLock { () -> SafeDispatchTimer? in
            defer { self.stored = nil }
            return self.stored
        }
        _ = timer
    }
}

// MARK: - Recording ticks

/// What one handler invocation saw.
struct TickRecord: Sendable {
    var tick: Tick
    /// The handler's own clock reading at entry.
    var clock: TimerInstant
    /// The recorder's epoch at entry (see ``TickRecorder/bumpEpoch()``).
    var epoch: UInt64
    /// Whether the handler ran on the queue marked with ``TickRecorder/queueKey``.
    var onMarkedQueue: Bool
}

/// Records every handler invocation, and lets a test wait for them.
final class TickRecorder: Sendable {
    static let queueKey = DispatchSpecificKey<Int>()

    let notifier: Notifier
    private let records = Locked<[TickRecord]>([])
    private let epochCounter = Atomic<UInt64>(0)
    private let clock: @Sendable () -> TimerInstant

    init(clock: @escaping @Sendable () -> TimerInstant, notifier: Notifier = Notifier()) {
        self.clock = clock
        self.notifier = notifier
    }

    convenience init(_ harness: any TimerHarness, notifier: Notifier = Notifier()) {
        self.init(clock: { harness.handlerClock() }, notifier: notifier)
    }

    /// A handler that records each tick.
    var handler: @Sendable (Tick) -> Void {
        { tick in self.record(tick) }
    }

    /// A handler for `schedule(interval:)`, which gets no tick: records the handler's clock
    /// as both the scheduled and the fired time.
    var untimedHandler: @Sendable () -> Void {
        {
            let now = self.clock()
            self.record(Tick(scheduled: now, fired: now, missed: 0, sequence: 0))
        }
    }

    func record(_ tick: Tick) {
        let clock = self.clock()
        let epoch = self.epochCounter.load(ordering: .acquiring)
        let onQueue = DispatchQueue.getSpecific(key: Self.queueKey) != nil
        self.records.withLock {
            $0.append(TickRecord(tick: tick, clock: clock, epoch: epoch, onMarkedQueue: onQueue))
        }
        self.notifier.notify()
    }

    var all: [TickRecord] { self.records.current }
    var ticks: [Tick] { self.all.map(\.tick) }
    var count: Int { self.records.withLock { $0.count } }

    /// Marks "a call that stops the old schedule has returned": records with this epoch or
    /// later started after it.
    @discardableResult
    func bumpEpoch() -> UInt64 {
        self.epochCounter.add(1, ordering: .acquiringAndReleasing).newValue
    }

    var epoch: UInt64 { self.epochCounter.load(ordering: .acquiring) }

    /// Records that started at `epoch` or later.
    func records(since epoch: UInt64) -> [TickRecord] {
        self.all.filter { $0.epoch >= epoch }
    }
}

/// A repeating timer's handler that records every tick and holds its first run until
/// ``release`` opens: a handler for a test to catch while it runs.
final class HeldFirstRun: Sendable {
    /// Opens when the first run has started.
    let entered = Gate()
    /// Lets the first run go on.
    let release = Gate()
    /// Opens when the first run has finished.
    let finished = Gate()
    private let recorder: TickRecorder

    init(recording recorder: TickRecorder) {
        self.recorder = recorder
    }

    var handler: @Sendable (Tick) -> Void {
        { tick in
            self.recorder.record(tick)
            if !self.entered.opened {
                self.entered.open()
                self.release.wait(timeout: .seconds(10))
                self.finished.open()
            }
        }
    }
}

/// What a one-shot's handler saw, for tests that push its deadline around: how often it
/// ran, for which deadline, and when by the handler's clock (to tell an early firing).
final class OneShotFirings: Sendable {
    let count = Atomic(0)
    let scheduled = Atomic(Int64(0))
    let clock = Atomic(Int64(0))

    /// Records `tick` as the handler's clock read `now` at its entry.
    func record(_ tick: Tick, now: TimerInstant = TimerClock.monotonic.now()) {
        self.scheduled.store(tick.scheduled.nanoseconds, ordering: .relaxed)
        self.clock.store(now.nanoseconds, ordering: .relaxed)
        self.count.add(1, ordering: .releasing)
    }
}

/// A serial queue marked with ``TickRecorder/queueKey``, for "runs on the given queue" checks.
func markedQueue(_ label: String) -> DispatchQueue {
    let queue = DispatchQueue(label: label)
    queue.setSpecific(key: TickRecorder.queueKey, value: 1)
    return queue
}

// MARK: - Small conversions

extension Duration {
    var inSeconds: Double {
        let (seconds, attoseconds) = self.components
        return Double(seconds) + Double(attoseconds) * 1e-18
    }

    /// Clamped to `Int64`, through the library's `TimerInstant` arithmetic: a plain
    /// `saturatingNanoseconds` here would be ambiguous between the library's and
    /// MetronomeTestSupport's.
    var nanoseconds: Int64 { TimerInstant(nanoseconds: 0).advanced(by: self).nanoseconds }
}

extension TimerInstant {
    /// The same instant as a `DispatchTime` (monotonic clock).
    var dispatchTime: DispatchTime {
        DispatchTime(uptimeNanoseconds: UInt64(self.nanoseconds))
    }
}

/// The name the state machine and property tests use for the shared seeded generator.
typealias SeededGenerator = SplitMix64

/// The seed for a random test: `METRONOME_SEED` if set, else fresh; always reported.
func testSeed() -> UInt64 {
    if let text = ProcessInfo.processInfo.environment["METRONOME_SEED"], let seed = UInt64(text) {
        return seed
    }
    return UInt64.random(in: 1...UInt64.max)
}
