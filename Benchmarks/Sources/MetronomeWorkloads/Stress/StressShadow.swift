import Metronome
import MetronomeTesting

/// The deadlines one schedule may fire at: one instant, or `start + k · period` for `k ≥ 0`.
struct StressGrid: Equatable, Sendable {
    var start: Int64
    var period: Int64?

    func contains(_ instant: Int64) -> Bool {
        guard instant >= self.start else { return false }
        guard let period = self.period else { return instant == self.start }
        return (instant - self.start) % period == 0
    }
}

/// What the callers of one timer know about it, to judge each handler entry: a pure value,
/// kept under the timer's own lock (never held while calling into the timer).
///
/// Calls into a timer run outside that lock, from many threads at once, so the order in
/// which they took effect is unknown when they overlap. Each call therefore brackets itself
/// with ``begin(_:)`` and ``end(_:_:accepted:)``: a call that no *arming* call (one that
/// `TimerContract` lets lead to `running`) overlapped knows what it did to the timer, by
/// the contract, and tightens the gate; any overlap opens it. While an arming call is in
/// flight its firing may already have started, so the gate is not checked. The result is
/// exact where it checks and never reports a race it cannot prove.
struct StressShadow {
    /// Which handler entries are allowed now.
    enum Gate: Equatable {
        /// Running, or not known: any entry is fine.
        case open
        /// Stopped by `cause`'s call; `allowance` entries (the one in flight) may still come.
        case stopped(cause: StressInvariant, allowance: Int)
        /// Rescheduled to `grid`: entries on it are fine, `allowance` others may still come.
        case rescheduled(grid: StressGrid, allowance: Int)
    }

    /// A call into the timer, with what judging the handler entries after it needs.
    enum Call {
        case schedule
        /// To `grid`; `allowance` entries of the old schedule may still come.
        case reschedule(StressGrid, allowance: Int)
        case suspend
        case resume
        /// `allowance` entries already under way may still come.
        case cancel(allowance: Int)
        case cancelAndWait

        var operation: TimerContract.Operation {
            switch self {
            case .schedule: .schedule
            case .reschedule: .reschedule
            case .suspend: .suspend
            case .resume: .resume
            case .cancel, .cancelAndWait: .cancel
            }
        }

        /// Whether the contract lets the call make the timer fire.
        var arms: Bool {
            TimerContract.rows.contains {
                $0.operation == self.operation && $0.outcome.accepted && $0.outcome.state == .running
            }
        }
    }

    /// What a call did to the timer, by the contract: the states its rows lead to.
    private enum Effect {
        /// Every row leads to running.
        case started
        /// No row leads to running.
        case stopped
        /// Every row keeps the state it starts from.
        case kept

        /// `accepted` is what the call returned; `nil`, for a call that returns nothing,
        /// takes its accepting and its refusing rows.
        init(of call: Call, accepted: Bool?) {
            let rows = TimerContract.rows.filter {
                $0.operation == call.operation && (accepted == nil || $0.outcome.accepted == accepted)
            }
            if rows.allSatisfy({ $0.outcome.state == .running }) {
                self = .started
            } else if !rows.contains(where: { $0.outcome.state == .running }) {
                self = .stopped
            } else if rows.allSatisfy({ $0.outcome.state == $0.state }) {
                self = .kept
            } else {
                preconditionFailure("TimerContract has \(call) both start and stop a timer")
            }
        }
    }

    /// A call in progress: the epoch it started in.
    struct Ticket {
        fileprivate let epoch: UInt64
    }

    /// A deadline grid that some schedule call gave the timer; `token` `nil` matches any handler.
    private struct Registered {
        var token: UInt64?
        var grid: StressGrid
    }

    /// How many grids are remembered; far more than can change while one firing is in flight.
    static let gridMemory = 64

    private(set) var gate = Gate.open
    private var armingInFlight = 0
    /// Bumped whenever an arming call completes.
    private var epoch: UInt64 = 0
    private var grids: [Registered] = []
    private var nextGrid = 0
    /// Handlers of this timer running now.
    private var handlersRunning = 0

    /// Remembers a grid before the call that arms it, so its firing always finds it.
    mutating func register(_ grid: StressGrid, token: UInt64?) {
        let entry = Registered(token: token, grid: grid)
        if self.grids.count < Self.gridMemory {
            self.grids.append(entry)
        } else {
            self.grids[self.nextGrid] = entry
            self.nextGrid = (self.nextGrid + 1) % Self.gridMemory
        }
    }

    mutating func begin(_ call: Call) -> Ticket {
        if call.arms { self.armingInFlight += 1 }
        return Ticket(epoch: self.epoch)
    }

    /// `call` returned `accepted` (`nil`: it returns nothing).
    mutating func end(_ ticket: Ticket, _ call: Call, accepted: Bool?) {
        let arming = call.arms
        let overlapped = self.epoch != ticket.epoch || self.armingInFlight > (arming ? 1 : 0)
        if arming {
            self.armingInFlight -= 1
            self.epoch &+= 1
        }
        // A refused call changes nothing.
        guard accepted != false else { return }
        if overlapped {
            self.gate = .open
            return
        }
        switch (Effect(of: call, accepted: accepted), self.gate) {
        case (.started, _):
            self.gate = .open
        case (.stopped, .stopped(let oldCause, let oldAllowance)):
            // Nothing was armed since the last stop: no new firing can be in flight.
            let stop = Self.stop(by: call)
            self.gate =
                stop.allowance <= oldAllowance
                ? .stopped(cause: stop.cause, allowance: stop.allowance)
                : .stopped(cause: oldCause, allowance: oldAllowance)
        case (.stopped, .open), (.stopped, .rescheduled):
            let stop = Self.stop(by: call)
            self.gate = .stopped(cause: stop.cause, allowance: stop.allowance)
        case (.kept, .stopped):
            // A suspended timer stays suspended under its new schedule.
            break
        case (.kept, .open), (.kept, .rescheduled):
            if case .reschedule(let grid, let allowance) = call {
                self.gate = .rescheduled(grid: grid, allowance: allowance)
            }
        }
    }

    /// The rule an entry breaks once `call` stopped the timer, and how many entries already
    /// under way may still come.
    private static func stop(by call: Call) -> (cause: StressInvariant, allowance: Int) {
        switch call {
        case .suspend: (.whileSuspended, 1)
        case .cancel(let allowance): (.afterCancel, allowance)
        // From another thread it waits for a running handler; from the timer's own handler
        // it returns at once, and that handler is the last.
        case .cancelAndWait: (.afterCancelAndWait, 0)
        case .schedule, .reschedule, .resume: preconditionFailure("TimerContract has \(call) stop a timer")
        }
    }

    /// A handler starts: records every rule the entry breaks in `broken`, and returns the
    /// newest grid the tick lies on (`nil` when none: ``StressInvariant/offSchedule``).
    /// `gated` is set when the gate was closed (the entry was judged against a stop or a
    /// reschedule): proof that the checks are not vacuous.
    mutating func enter(token: UInt64, scheduled: Int64, broken: inout [StressInvariant], gated: inout Bool)
        -> StressGrid?
    {
        if self.handlersRunning > 0 { broken.append(.overlappingHandlers) }
        self.handlersRunning += 1
        let grid = self.newestGrid(token: token, containing: scheduled)
        if grid == nil { broken.append(.offSchedule) }
        guard self.armingInFlight == 0 else { return grid }
        switch self.gate {
        case .open:
            break
        case .stopped(let cause, let allowance):
            gated = true
            if allowance > 0 {
                self.gate = .stopped(cause: cause, allowance: allowance - 1)
            } else {
                broken.append(cause)
            }
        case .rescheduled(let grid, let allowance):
            if grid.contains(scheduled) { break }
            gated = true
            if allowance > 0 {
                self.gate = .rescheduled(grid: grid, allowance: allowance - 1)
            } else {
                broken.append(.afterReschedule)
            }
        }
        return grid
    }

    private func newestGrid(token: UInt64, containing instant: Int64) -> StressGrid? {
        // Newest first: the ring's write position walks backwards from the last entry written.
        let count = self.grids.count
        for step in 0..<count {
            let index = count < Self.gridMemory ? count - 1 - step : (self.nextGrid - 1 - step + 2 * count) % count
            let entry = self.grids[index]
            if (entry.token == nil || entry.token == token) && entry.grid.contains(instant) { return entry.grid }
        }
        return nil
    }

    mutating func exit() {
        self.handlersRunning -= 1
    }
}
