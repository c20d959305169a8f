@preconcurrency import Dispatch

/// The one seam between a timer and what fires it: the engine, GCD, or a test double.
///
/// An arming is *reserved* before it is *started*: the timer records the reserved id as its
/// current arming in between, so the first firing, which may come at once on another
/// thread, always finds it. Every firing carries its arming's id; the timer's state machine
/// runs the handler only for the current one, so a seam keeps no state about timers.
protocol TimerFiring: AnyObject, Sendable {
    /// The current time on `clock`, in nanoseconds, as this seam's firings measure it.
    func now(_ clock: TimerClock) -> Int64

    /// A new arming whose firings will go to `receiver`, not yet started.
    ///
    /// - Throws: Why the seam can arm no more: `ESHUTDOWN` for an engine that was shut down,
    ///   `ENOMEM` when memory ran out.
    func reserve(for receiver: FiringReceiver) throws(TimerError) -> UInt64

    /// Starts a reserved arming. Starting one that was disarmed meanwhile does nothing.
    ///
    /// - Throws: Why the seam refused it, such as `ESHUTDOWN` for an engine shut down
    ///   since the reservation. The arming still needs ``disarm(_:)``.
    func start(_ arming: UInt64, _ schedule: TimerSchedule, clock: TimerClock) throws(TimerError)

    /// Stops an arming's firings, started or not, and releases it. Never waits for a
    /// running firing.
    func disarm(_ arming: UInt64)

    /// Re-arms a started arming for `schedule` under a new id, which every firing of the
    /// new schedule carries, while one already under way carries the old; the old id is
    /// then spent. Never waits for a running firing.
    ///
    /// - Returns: The new id; `nil` when this seam cannot move an arming, and the timer
    ///   disarms it and arms anew.
    /// - Throws: Why the seam refused; the arming keeps its old schedule.
    func move(_ arming: UInt64, _ schedule: TimerSchedule, clock: TimerClock) throws(TimerError) -> UInt64?

    /// Whether this seam has stopped for good: it drops every arming and refuses new ones.
    var hasStopped: Bool { get }

    /// Whether a one-shot moved later may keep its arming and re-arm when it fires (see
    /// `TimerStateMachine.reschedule`): only on a live seam that refuses an arming only
    /// once it has stopped (or without memory), so that no refusal the reschedule should
    /// report is lost.
    var keepsArmingsMovedLater: Bool { get }
}

extension TimerFiring {
    func now(_ clock: TimerClock) -> Int64 {
        clock.now().nanoseconds
    }

    func move(_ arming: UInt64, _ schedule: TimerSchedule, clock: TimerClock) throws(TimerError) -> UInt64? {
        nil
    }

    var hasStopped: Bool { false }

    var keepsArmingsMovedLater: Bool { false }
}

/// A seam in one word, as a timer keeps it: an existential takes two (the object and its
/// witness table), 8 MB more for a million timers. The case lives in the class pointer's
/// spare bits.
enum FiringSeam: Sendable {
    case engine(TimerEngine)
    case backend(BackendFiring)

    var firing: any TimerFiring {
        switch self {
        case .engine(let engine): engine
        case .backend(let backend): backend
        }
    }

    // The seam's calls, forwarded case by case: an existential made through ``firing`` for
    // each call cost a quarter of `SafeDispatchTimer`'s add+cancel rate.

    func now(_ clock: TimerClock) -> Int64 {
        switch self {
        case .engine(let engine): engine.now(clock)
        case .backend(let backend): backend.now(clock)
        }
    }

    func reserve(for receiver: FiringReceiver) throws(TimerError) -> UInt64 {
        switch self {
        case .engine(let engine): try engine.reserve(for: receiver)
        case .backend(let backend): backend.reserve(for: receiver)
        }
    }

    func start(_ arming: UInt64, _ schedule: TimerSchedule, clock: TimerClock) throws(TimerError) {
        switch self {
        case .engine(let engine): try engine.start(arming, schedule, clock: clock)
        case .backend(let backend): try backend.start(arming, schedule, clock: clock)
        }
    }

    func disarm(_ arming: UInt64) {
        switch self {
        case .engine(let engine): engine.disarm(arming)
        case .backend(let backend): backend.disarm(arming)
        }
    }

    func move(_ arming: UInt64, _ schedule: TimerSchedule, clock: TimerClock) throws(TimerError) -> UInt64? {
        switch self {
        case .engine(let engine): try engine.move(arming, schedule, clock: clock)
        case .backend(let backend): try backend.move(arming, schedule, clock: clock)
        }
    }

    var hasStopped: Bool {
        switch self {
        case .engine(let engine): engine.hasStopped
        case .backend(let backend): backend.hasStopped
        }
    }

    var keepsArmingsMovedLater: Bool {
        switch self {
        case .engine(let engine): engine.keepsArmingsMovedLater
        case .backend(let backend): backend.keepsArmingsMovedLater
        }
    }
}

/// Where a seam delivers firings: one object per timer.
///
/// A class rather than a protocol so that the engine can carry it as its C timers' context
/// and reach ``receive(_:from:)`` through one pointer and one table lookup: arming allocates
/// nothing, and a firing does no dynamic cast.
class FiringReceiver: @unchecked Sendable {
    /// Where firings are delivered; `nil` means on the seam's own thread.
    final let queue: DispatchQueue?

    init(queue: DispatchQueue?) {
        self.queue = queue
    }

    /// A firing of `arming`, on ``queue``. Only a timer receives firings, and it overrides
    /// this.
    func receive(_ tick: Tick, from arming: UInt64) {
        preconditionFailure("a FiringReceiver subclass receives firings")
    }

    /// A firing of `arming` on a seam's own thread, for a receiver with a ``queue``: to be
    /// taken there. Only a timer has a queue, and it overrides this.
    func enqueue(_ tick: Tick, from arming: UInt64) {
        preconditionFailure("a FiringReceiver with a queue enqueues firings")
    }

    /// The seam let go of one of this receiver's armings, with none of its locks held.
    func released() {}
}
