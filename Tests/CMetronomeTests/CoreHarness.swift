#if Engine
// Shared fixtures for the contract tests of the C core: an engine fixture whose every
// timer context is a `Probe` (it records each callback and counts its releases), clocks
// and bounds. The lock box, gate, threads and seeded generator are MetronomeTestSupport's,
// re-exported here for every suite of this target.
//
// Everything here runs on real time: the real timerfds and the real libevent loop.
import CMetronome
import Glibc
@_exported import MetronomeTestSupport
import Synchronization
import Testing

extension Tag {
    /// Tests that sleep on the real clocks: keep them serialized and their waits generous.
    @Tag static var realTime: Self
}

/// Every suite of this target nests in this one, so that real-time suites never run
/// beside each other on the machine's two cores, and no test waits for ever.
@Suite(.serialized, .timeLimit(.minutes(1))) enum CoreContractTests {}

// MARK: - Time

/// Nanosecond constants and clock readings taken by the test itself, independently of
/// `mtr_clock_now`.
enum Time {
    static let us: Int64 = 1_000
    static let ms: Int64 = 1_000_000
    static let s: Int64 = 1_000_000_000

    static func posixClock(_ clock: mtr_clock_id) -> clockid_t {
        switch clock {
        case .MTR_CLOCK_MONOTONIC: CLOCK_MONOTONIC
        case .MTR_CLOCK_BOOTTIME: CLOCK_BOOTTIME
        case .MTR_CLOCK_REALTIME: CLOCK_REALTIME
        }
    }

    static func now(_ clock: mtr_clock_id) -> Int64 {
        var ts = timespec()
        clock_gettime(posixClock(clock), &ts)
        return Int64(ts.tv_sec) * s + Int64(ts.tv_nsec)
    }

    static func monotonic() -> Int64 { MonotonicTime.now() }

    /// Sleeps at least `ns`. Only for simulating work inside a callback; tests wait on a
    /// `Monitor` instead.
    static func sleep(_ ns: Int64) { MonotonicTime.sleep(for: .nanoseconds(ns)) }

    /// Busy-waits `ns`: a callback that keeps the firing thread occupied without sleeping.
    static func spin(_ ns: Int64) { MonotonicTime.spin(nanoseconds: ns) }
}

/// How long a test waits for what must happen, and what slows everything down.
enum Bounds {
    /// True when a sanitizer runtime is linked in: everything runs several times slower.
    static let sanitized = threadSanitized || linked("__asan_init")

    static let threadSanitized = linked("__tsan_init")

    private static func linked(_ symbol: String) -> Bool {
        let me = dlopen(nil, RTLD_NOW)
        defer { if let me { dlclose(me) } }
        return dlsym(me, symbol) != nil
    }

    /// How long to wait for something that must happen (only reached on failure).
    static let patienceNs: Int64 = 10 * Time.s
}

// MARK: - Monitor: the shared lock box, waited on in nanoseconds

/// The contract tests wait in nanoseconds on their own clock readings.
typealias Monitor<State> = LockedCondition<State>

extension LockedCondition {
    func read<Result>(_ body: (Value) throws -> Result) rethrows -> Result {
        try self.withLock { try body($0) }
    }

    /// Waits until `predicate` holds or `timeoutNs` has passed; returns whether it holds.
    /// To wait for something that must NOT happen, wait a bounded time and expect false.
    @discardableResult
    func wait(timeoutNs: Int64 = Bounds.patienceNs, until predicate: (Value) -> Bool) -> Bool {
        self.wait(timeout: .nanoseconds(timeoutNs), until: predicate)
    }
}

// MARK: - A forked child

/// Runs `body` in a forked child and returns its exit code, or nil (after recording an
/// issue) if it was killed or did not finish in `timeoutNs`. For what must not touch
/// this process: its environment, its privileges. The child may only make C calls and
/// plain arithmetic: locks other threads held at the fork stay held there.
func exitCodeOfChild(
    timeoutNs: Int64 = 5 * Time.s, sourceLocation: SourceLocation = #_sourceLocation, _ body: () -> Int32
) -> Int32? {
    let pid = fork()
    if pid == 0 { _exit(body()) }
    guard pid > 0 else {
        Issue.record("fork: \(errno)", sourceLocation: sourceLocation)
        return nil
    }
    var status: Int32 = 0
    let giveUp = Time.monotonic() + timeoutNs
    // waitpid has no timeout: poll it, bounded, and kill a stuck child.
    while waitpid(pid, &status, WNOHANG) == 0 {
        if Time.monotonic() > giveUp {
            kill(pid, SIGKILL)
            waitpid(pid, &status, 0)
            Issue.record("the child did not finish", sourceLocation: sourceLocation)
            return nil
        }
        Time.sleep(Time.ms)
    }
    guard status & 0x7f == 0 else {
        Issue.record("the child was killed by signal \(status & 0x7f)", sourceLocation: sourceLocation)
        return nil
    }
    return (status >> 8) & 0xff
}

// MARK: - The engine fixture

/// The raw engine pointer, handed to callbacks.
struct EngineRef: @unchecked Sendable {
    let handle: OpaquePointer
}

/// What a callback saw: the tick, and the test's own clock readings when it started.
struct FiredTick: Sendable {
    var probe: Int
    /// The tick as the engine handed it to the callback.
    var tick: mtr_tick
    /// The tick's clock, read by the test at the start of the callback.
    var clockNs: Int64
    /// CLOCK_MONOTONIC at the start and at the end of the callback.
    var startNs: Int64
    var endNs: Int64 = 0

    var scheduled: Int64 { self.tick.scheduled_ns }
    var fired: Int64 { self.tick.fired_ns }
    var missed: UInt64 { self.tick.missed }
    var sequence: UInt64 { self.tick.sequence }
    var timer: mtr_timer_id { self.tick.timer }
    var clock: mtr_clock_id { self.tick.clock }
}

struct Release: Sendable {
    var probe: Int
    var atNs: Int64
}

/// Everything the callbacks of one engine recorded.
struct EngineLog: Sendable {
    var firings: [FiredTick] = []
    var releases: [Release] = []
    /// Callbacks started and not yet returned.
    var running = 0
    /// Broken contracts seen from inside a callback or a release.
    var violations: [String] = []
}

/// The arguments of a probe's action.
struct Callback: @unchecked Sendable {
    let engine: EngineRef
    let probe: Probe
    let tick: mtr_tick
    /// Index of this firing in the engine's log.
    let firing: Int
}

/// One timer's context. The engine holds one retain (taken at create, dropped by the
/// first release); the fixture holds another, so a second release or a late callback
/// is recorded as a violation instead of being a use-after-free.
final class Probe: @unchecked Sendable {
    let index: Int
    let engine: EngineRef
    let log: Monitor<EngineLog>
    /// Runs inside the callback, after the firing is logged.
    let action: (@Sendable (Callback) -> Void)?
    /// Written once before the timer is armed; the engine lock orders it before callbacks.
    var id: mtr_timer_id = 0
    /// Runs inside the release, after it is logged; set before anything can release it.
    var onRelease: (@Sendable (Probe) -> Void)?
    /// Set, under the fixture's lock, when the engine refused to create its timer.
    var neverCreated = false

    let fires = Atomic<Int>(0)
    let releases = Atomic<Int>(0)
    let inCallback = Atomic<Bool>(false)

    init(index: Int, engine: EngineRef, log: Monitor<EngineLog>, action: (@Sendable (Callback) -> Void)?) {
        self.index = index
        self.engine = engine
        self.log = log
        self.action = action
    }

    func fire(_ tick: mtr_tick) {
        let clockNs = Time.now(tick.clock)
        let startNs = Time.monotonic()
        let concurrent = inCallback.exchange(true, ordering: .acquiringAndReleasing)
        let afterRelease = releases.load(ordering: .acquiring) > 0
        fires.add(1, ordering: .relaxed)
        let slot = log.update { log in
            if concurrent { log.violations.append("probe \(index): two callbacks at once") }
            if afterRelease { log.violations.append("probe \(index): callback after its release") }
            log.running += 1
            log.firings.append(FiredTick(probe: index, tick: tick, clockNs: clockNs, startNs: startNs))
            return log.firings.count - 1
        }
        action?(Callback(engine: engine, probe: self, tick: tick, firing: slot))
        let endNs = Time.monotonic()
        inCallback.store(false, ordering: .releasing)
        log.update { log in
            log.firings[slot].endNs = endNs
            log.running -= 1
        }
    }

    func release() {
        let atNs = Time.monotonic()
        let count = releases.add(1, ordering: .acquiringAndReleasing).newValue
        let duringCallback = inCallback.load(ordering: .acquiring)
        log.update { log in
            if duringCallback { log.violations.append("probe \(index): released while its callback runs") }
            if count > 1 { log.violations.append("probe \(index): released \(count) times") }
            log.releases.append(Release(probe: index, atNs: atNs))
        }
        onRelease?(self)
        if count == 1 { Unmanaged.passUnretained(self).release() }
    }

    // Thin wrappers over the C API; each returns the errno.
    func armOnce(_ clock: mtr_clock_id = .MTR_CLOCK_MONOTONIC, at deadline: Int64, leeway: Int64 = 0) -> Int32 {
        mtr_timer_arm_once(engine.handle, id, clock, deadline, leeway)
    }

    func armRepeating(
        _ clock: mtr_clock_id = .MTR_CLOCK_MONOTONIC, start: Int64, period: Int64, leeway: Int64 = 0
    ) -> Int32 {
        mtr_timer_arm_repeating(engine.handle, id, clock, start, period, leeway)
    }

    /// Moves the timer with `mtr_timer_move` and, on success, names it by its new id.
    func move(at deadline: Int64, period: Int64 = 0, leeway: Int64 = 0) -> Int32 {
        var moved: mtr_timer_id = 0
        let rc = mtr_timer_move(engine.handle, id, .MTR_CLOCK_MONOTONIC, deadline, period, leeway, &moved)
        if rc == 0 { id = moved }
        return rc
    }

    /// Arms a repeating schedule with a missed-deadline policy (`mtr_timer_move_policy`)
    /// and, on success, names the timer by its new id.
    func repeating(start: Int64, period: Int64, policy: mtr_missed_policy) -> Int32 {
        var moved: mtr_timer_id = 0
        let rc = mtr_timer_move_policy(
            engine.handle, id, .MTR_CLOCK_MONOTONIC, start, period, 0, policy, &moved)
        if rc == 0 { id = moved }
        return rc
    }

    func cancel() -> Int32 { mtr_timer_cancel(engine.handle, id) }
    func cancelSync() -> Int32 { mtr_timer_cancel_sync(engine.handle, id) }
    func destroy() -> Int32 { mtr_timer_destroy(engine.handle, id) }
}

struct CoreError: Error, CustomStringConvertible {
    let call: String
    let code: Int32
    var description: String { "\(call) returned \(code) (\(String(cString: strerror(code))))" }
}

/// An engine whose every timer context is a `Probe`. Destroyed on deinit if the test
/// did not destroy it.
final class Engine: @unchecked Sendable {
    let ref: EngineRef
    let log = Monitor(EngineLog())
    private let probes = Monitor([Probe]())
    private let destroyed = Atomic<Bool>(false)

    var handle: OpaquePointer { ref.handle }

    /// An engine for a contract test. Without `standby`, one thread fires every callback, so a
    /// callback that blocks holds the whole engine, as many tests need; the standby's own
    /// suite (`CoreStandbyTests`) turns it on.
    init(
        spinNs: Int64 = 0, realtimePriority: Int32 = 0, cpu: Int32 = -1, lateThresholdNs: Int64? = nil,
        shards: UInt32 = 1, expectedTimers: Int = 0, standby: Bool = false
    ) throws {
        var config = mtr_engine_config()
        mtr_engine_config_init(&config)
        config.no_standby = !standby
        // A NULL context (a test may create such a timer) has nothing to record.
        config.on_fire = { context, tick in
            guard let context else { return }
            Unmanaged<Probe>.fromOpaque(context).takeUnretainedValue().fire(tick.pointee)
        }
        config.on_release = { context in
            guard let context else { return }
            Unmanaged<Probe>.fromOpaque(context).takeUnretainedValue().release()
        }
        config.spin_ns = spinNs
        config.realtime_priority = realtimePriority
        config.cpu = cpu
        if let lateThresholdNs { config.late_threshold_ns = lateThresholdNs }
        config.shards = shards
        var handle: OpaquePointer?
        let rc = mtr_engine_create(&config, &handle)
        guard rc == 0, let handle else { throw CoreError(call: "mtr_engine_create", code: rc) }
        ref = EngineRef(handle: handle)
        if expectedTimers > 0 {
            log.update {
                $0.firings.reserveCapacity(expectedTimers)
                $0.releases.reserveCapacity(expectedTimers)
            }
            probes.update { $0.reserveCapacity(expectedTimers) }
        }
    }

    deinit { destroy() }

    /// A new engine with one timer that has no action: what most contract tests start from.
    static func withTimer() throws -> (Engine, Probe) {
        let engine = try Engine()
        return (engine, try engine.makeTimer())
    }

    /// Creates a timer whose callback logs the firing and then runs `action`.
    /// Callable from callbacks too.
    @discardableResult
    func makeTimer(_ action: (@Sendable (Callback) -> Void)? = nil) throws -> Probe {
        let probe = probes.update { probes in
            let probe = Probe(index: probes.count, engine: ref, log: log, action: action)
            probes.append(probe)
            return probe
        }
        var id: mtr_timer_id = 0
        let context = Unmanaged.passRetained(probe).toOpaque()
        let rc = mtr_timer_create(handle, context, &id)
        guard rc == 0 else {
            Unmanaged<Probe>.fromOpaque(context).release()
            // It keeps its place, so that indexes stay unique while other threads create.
            probes.update { _ in probe.neverCreated = true }
            throw CoreError(call: "mtr_timer_create", code: rc)
        }
        probe.id = id
        return probe
    }

    /// Creates `count` timers without actions, under one acquisition of the fixture's lock.
    func makeTimers(_ count: Int) throws -> [Probe] {
        try probes.update { probes in
            var made: [Probe] = []
            made.reserveCapacity(count)
            for _ in 0..<count {
                let probe = Probe(index: probes.count, engine: ref, log: log, action: nil)
                var id: mtr_timer_id = 0
                let context = Unmanaged.passRetained(probe).toOpaque()
                let rc = mtr_timer_create(handle, context, &id)
                guard rc == 0 else {
                    Unmanaged<Probe>.fromOpaque(context).release()
                    throw CoreError(call: "mtr_timer_create", code: rc)
                }
                probe.id = id
                probes.append(probe)
                made.append(probe)
            }
            return made
        }
    }

    /// Every probe whose timer was created.
    var allProbes: [Probe] { probes.read { $0.filter { !$0.neverCreated } } }

    var counters: mtr_counters {
        var counters = mtr_counters()
        mtr_engine_get_counters(handle, &counters)
        return counters
    }

    var info: mtr_engine_info {
        var info = mtr_engine_info()
        mtr_engine_get_info(handle, &info)
        return info
    }

    var firings: [FiredTick] { log.read { $0.firings } }

    /// Destroys the engine (once) from the calling thread.
    func destroy() {
        if !destroyed.exchange(true, ordering: .acquiringAndReleasing) {
            mtr_engine_destroy(handle)
        }
    }

    /// For a test whose callback destroyed the engine itself.
    func markDestroyed() { destroyed.store(true, ordering: .releasing) }

    /// Stops the engine from the calling thread; the handle stays valid.
    func stop() { mtr_engine_stop(handle) }

    /// Waits until `count` firings are logged.
    @discardableResult
    func waitFirings(_ count: Int, timeoutNs: Int64 = Bounds.patienceNs) -> Bool {
        log.wait(timeoutNs: timeoutNs) { $0.firings.count >= count }
    }

    /// Waits until every probe created so far has been released.
    @discardableResult
    func waitAllReleased(timeoutNs: Int64 = Bounds.patienceNs) -> Bool {
        let count = allProbes.count
        return log.wait(timeoutNs: timeoutNs) { $0.releases.count >= count }
    }

    /// Destroys the engine (unless it is already), which releases every context left, then
    /// expects every context released exactly once and no contract broken.
    func destroyAndExpectAllReleasedOnce(sourceLocation: SourceLocation = #_sourceLocation) {
        destroy()
        expectAllReleasedOnce(sourceLocation: sourceLocation)
    }

    /// Every context released exactly once, and no callback broke a contract.
    func expectAllReleasedOnce(sourceLocation: SourceLocation = #_sourceLocation) {
        let probes = allProbes
        let wrong = probes.filter { $0.releases.load(ordering: .acquiring) != 1 }
        #expect(
            wrong.isEmpty,
            "\(wrong.count) of \(probes.count) contexts not released exactly once",
            sourceLocation: sourceLocation)
        expectNoViolations(sourceLocation: sourceLocation)
    }

    func expectNoViolations(sourceLocation: SourceLocation = #_sourceLocation) {
        let violations = log.read { $0.violations }
        #expect(violations.isEmpty, "\(violations.prefix(5))", sourceLocation: sourceLocation)
    }
}

// MARK: - Assertions shared by suites

/// "Never early", exactly: the engine's commit time and the test's own reading of the
/// clock in the callback are both at or after the deadline.
func expectNeverEarly(_ firings: [FiredTick], sourceLocation: SourceLocation = #_sourceLocation) {
    let early = firings.filter { $0.fired < $0.scheduled || $0.clockNs < $0.scheduled }
    #expect(
        early.isEmpty, "\(early.count) early firings, first: \(String(describing: early.first))",
        sourceLocation: sourceLocation)
}

extension mtr_clock_id {
    static let all: [mtr_clock_id] = [.MTR_CLOCK_MONOTONIC, .MTR_CLOCK_BOOTTIME, .MTR_CLOCK_REALTIME]

    /// A value outside the enum, as C code could pass it.
    static let unknown: mtr_clock_id = unsafeBitCast(UInt32(7), to: mtr_clock_id.self)
}
#endif
