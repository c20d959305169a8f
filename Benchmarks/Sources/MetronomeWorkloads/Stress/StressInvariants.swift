import Metronome
import MetronomeMeasurements

/// One rule `metronome stress` checks; the raw value is its key in the JSON output.
enum StressInvariant: String, CaseIterable, Codable, Sendable {
    /// A handler started after `cancelAndWait()` returned, before the next schedule or resume.
    case afterCancelAndWait = "after_cancel_and_wait"
    /// More than the one in-flight handler started after `cancel()` returned `true`.
    case afterCancel = "after_cancel"
    /// More than the one in-flight handler started after `suspend()` returned `true`.
    case whileSuspended = "while_suspended"
    /// More than one handler of the old schedule started after `reschedule` returned `true`.
    case afterReschedule = "after_reschedule"
    /// The handler's own `CLOCK_MONOTONIC` reading was before `tick.scheduled`; for an
    /// `ExpiringValue`, it expired before its lifetime had passed since its creation or
    /// last successful touch.
    case early = "early"
    /// `tick.scheduled` is no deadline (nor grid point) the timer was ever given.
    case offSchedule = "off_schedule"
    /// A one-shot schedule ran its handler twice.
    case oneShotTwice = "one_shot_twice"
    /// `tick.missed` disagrees with the lateness (with leeway 0: `lateness ≤ period`, and
    /// `lateness > 0` when deadlines were skipped), or a one-shot reported missed periods.
    case missedVersusLateness = "missed_vs_lateness"
    /// A repeating arming delivered a sequence number not above the previous one.
    case sequenceNotIncreasing = "sequence_not_increasing"
    /// `sequence ≠ previous.sequence + missed + 1` within one arming.
    case sequenceGap = "sequence_gap"
    /// Two handlers of one timer ran at once: on any queue, concurrent too, they must not.
    case overlappingHandlers = "overlapping_handlers"
    /// Handler contexts still alive after every timer was dropped and the engines stopped.
    case liveContexts = "live_contexts"
    /// The engine's `fired` counter is below the handler entries seen on it.
    case engineFired = "engine_fired_counter"
    /// The engine's `fired + missedPeriods` is below the periods its handlers saw: one per
    /// entry plus each tick's `missed`.
    case engineMissed = "engine_missed_counter"
    /// The engine still counts armed timers after every timer was dropped.
    case engineArmed = "engine_armed_at_end"
    /// A scheduler id did not get exactly one terminal event (executed once, or cancelled).
    case schedulerTerminal = "scheduler_terminal_events"
    /// A scheduler event came after the id's terminal event, or had the wrong `willRepeat`.
    case schedulerOrder = "scheduler_event_order"
    /// The `cancel` calls that returned `true` differ from the `cancelled` events delivered.
    case schedulerCancelCount = "scheduler_cancel_count"
    /// No operation completed for a long time: a hang (deadlock) in some call.
    case stall = "stall"
    /// A forked child crashed, hung, or saw the library misbehave (its exit code says how).
    case forkedChild = "forked_child"
    /// An engine's firing thread was still running after every timer and engine was dropped.
    case enginesAlive = "engines_alive_at_end"
    /// A timer never fired: beside one that outran its period on another clock or shard, or
    /// on an engine after a handler of it forked.
    case starved = "starved"
    /// A call that met a stopping engine answered wrongly: `start(...)` with another error
    /// than `.engineShutDown`, `withDeadline` by running its body uncancelled.
    case wrongShutdownError = "wrong_shutdown_error"
    /// The engine's `armed` counter was not 0 once every one-shot on it fired or was cancelled.
    case armedAfterSettled = "armed_after_settled"
    /// After its timerfds were closed under it, an engine kept accepting timers, hung its
    /// shutdown, or lost or doubled a context's release (the child process says which).
    case descriptorSweep = "descriptor_sweep"
    case descriptorReuse = "descriptor_reuse"
    /// A fork inside a release callback crashed or hung the child or the parent.
    case forkInRelease = "fork_in_release"
    /// A process spawned from a handler outlived a SIGTERM by more than two seconds.
    case spawnIgnoresSigterm = "spawned_ignores_sigterm"
    /// An `ExpiringValue` ran its expiry more than once.
    case expiredTwice = "expired_twice"
    /// An `ExpiringValue` expired although an `invalidate()` of it returned the value.
    case expiredAfterInvalidate = "expired_after_invalidate"

    /// What the row of the violations table says.
    var summary: String {
        switch self {
        case .afterCancelAndWait: "handler after cancelAndWait returned"
        case .afterCancel: "handler after cancel returned (beyond in-flight)"
        case .whileSuspended: "handler while suspended (beyond in-flight)"
        case .afterReschedule: "old schedule after reschedule (beyond in-flight)"
        case .early: "handler or expiry before its deadline"
        case .offSchedule: "tick for a deadline never armed"
        case .oneShotTwice: "one-shot fired twice"
        case .missedVersusLateness: "missed inconsistent with lateness"
        case .sequenceNotIncreasing: "sequence not increasing"
        case .sequenceGap: "sequence ≠ previous + missed + 1"
        case .overlappingHandlers: "handlers of one timer overlapped"
        case .liveContexts: "handler contexts alive at the end"
        case .engineFired: "engine fired counter < handler entries"
        case .engineMissed: "engine fired + missed < periods seen"
        case .engineArmed: "engine armed counter ≠ 0 at the end"
        case .schedulerTerminal: "scheduler id without exactly one terminal event"
        case .schedulerOrder: "scheduler event after terminal / wrong kind"
        case .schedulerCancelCount: "scheduler cancel()=true ≠ cancelled events"
        case .stall: "no progress (hang)"
        case .forkedChild: "forked child failed"
        case .enginesAlive: "engines alive at the end"
        case .starved: "a timer that was due never fired"
        case .wrongShutdownError: "call on a stopping engine: error ≠ engineShutDown"
        case .armedAfterSettled: "armed ≠ 0 once every one-shot settled"
        case .descriptorSweep: "engine ran on or hung after its timerfds closed"
        case .descriptorReuse: "engine took another engine's descriptors, reused after a sweep, for its own"
        case .forkInRelease: "fork in a release callback crashed or hung"
        case .spawnIgnoresSigterm: "process spawned from a handler ignored SIGTERM"
        case .expiredTwice: "value expired twice"
        case .expiredAfterInvalidate: "value expired after invalidate() won"
        }
    }
}

/// Every violation seen, per subject and invariant, with the first few described.
///
/// Violations are rare, so a lock per record costs nothing in a clean run.
public final class StressViolations: Sendable {
    private struct Storage {
        var counts: [String: [StressInvariant: Int]] = [:]
        var examples: [String] = []
    }

    /// How many descriptions are kept per subject and invariant; counts are always complete.
    static let exampleLimit = 3

    private let storage = LockedCondition(Storage())

    public init() {}

    func record(_ invariant: StressInvariant, subject: String, count: Int = 1, _ detail: @autoclosure () -> String) {
        guard count > 0 else { return }
        let example = "\(subject): \(invariant.rawValue): \(detail())"
        self.storage.withLock { storage in
            let before = storage.counts[subject, default: [:]][invariant, default: 0]
            storage.counts[subject, default: [:]][invariant] = before + count
            if before < Self.exampleLimit { storage.examples.append(example) }
        }
    }

    func counts(subject: String) -> [StressInvariant: Int] {
        self.storage.withLock { $0.counts[subject] ?? [:] }
    }

    public var total: Int {
        self.storage.withLock { $0.counts.values.reduce(0) { $0 + $1.values.reduce(0, +) } }
    }

    public var examples: [String] {
        self.storage.withLock { $0.examples }
    }
}
