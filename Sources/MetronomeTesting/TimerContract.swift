import Metronome

/// What ``SafeDispatchTimer`` promises, as data: for each state and each operation, whether
/// the operation is accepted and which state follows.
///
/// Use it as the oracle in tests of code built on `SafeDispatchTimer`: read the state, make
/// the call, and compare what happened with the row for that state and call.
///
/// ```swift
/// let before = timer.state
/// let accepted = timer.suspend()
/// let expected = TimerContract.outcome(of: .suspend, in: before)
/// #expect(accepted == expected.accepted)
/// #expect(timer.state == expected.state)
/// ```
///
/// Every form of `schedule` follows the ``Operation/schedule`` rows and every form of
/// `reschedule` the ``Operation/reschedule`` rows. `cancelAndWait()` and
/// `cancelAndAwaitHandlers()` follow the ``Operation/cancel`` rows and return nothing. A
/// refused call changes nothing.
///
/// Two refusals do not depend on the state, so they are not rows:
/// - A call with values no schedule can have (a negative delay, a period that is not
///   positive) returns `false` and changes nothing.
/// - A backend that refuses to arm, such as a ``TimerEngine`` that was shut down, makes the
///   call return `false`. A `schedule` then changes nothing, as it is documented to do;
///   a `reschedule` of a running timer or a `resume` leaves the timer cancelled, since its
///   old arming is already gone.
///
/// The StateMachine article of Metronome's documentation shows ``markdownTable``, and a test
/// keeps the two equal.
public enum TimerContract {
    /// Something that can change a timer's state: a public call, or the backend reaching a
    /// deadline.
    public enum Operation: CaseIterable, Sendable {
        /// Any form of `schedule`.
        case schedule
        /// Any form of `reschedule`.
        case reschedule
        /// `suspend()`.
        case suspend
        /// `resume()`.
        case resume
        /// `cancel()`, `cancelAndWait()` or `cancelAndAwaitHandlers()`.
        case cancel
        /// A one-shot timer's deadline arrives.
        case oneShotFires
        /// A repeating timer's deadline arrives.
        case repeatingFires

        /// Whether this is a call, whose result is its return value; otherwise a firing,
        /// whose result is whether the handler runs.
        public var isCall: Bool {
            switch self {
            case .schedule, .reschedule, .suspend, .resume, .cancel: true
            case .oneShotFires, .repeatingFires: false
            }
        }
    }

    /// What an operation does in one state.
    public struct Outcome: Hashable, Sendable {
        /// For a call, what it returns; for a firing, whether the handler runs.
        public var accepted: Bool
        /// The state right after the operation.
        public var state: SafeDispatchTimer.State

        /// Creates an outcome.
        public init(accepted: Bool, state: SafeDispatchTimer.State) {
            self.accepted = accepted
            self.state = state
        }
    }

    /// One row of the table.
    public struct Row: Hashable, Sendable {
        /// The state before the operation.
        public var state: SafeDispatchTimer.State
        /// The operation.
        public var operation: Operation
        /// What the operation does there.
        public var outcome: Outcome

        init(
            _ state: SafeDispatchTimer.State, _ operation: Operation, _ accepted: Bool, _ next: SafeDispatchTimer.State
        ) {
            (self.state, self.operation, self.outcome) = (state, operation, Outcome(accepted: accepted, state: next))
        }
    }

    /// Every state, in the order the table lists them.
    public static let states: [SafeDispatchTimer.State] = [.idle, .running, .suspended, .cancelled]

    /// The table: one row per state and operation, ordered by ``states`` and then by
    /// ``Operation``.
    ///
    /// Only a running timer has a deadline to reach, so a firing in any other state runs no
    /// handler. A handler that had already started when `suspend` or `cancel` returned still
    /// finishes; `cancelAndWait()` waits for it.
    public static let rows: [Row] = [
        Row(.idle, .schedule, true, .running),
        Row(.idle, .reschedule, false, .idle),
        Row(.idle, .suspend, false, .idle),
        Row(.idle, .resume, false, .idle),
        Row(.idle, .cancel, false, .idle),
        Row(.idle, .oneShotFires, false, .idle),
        Row(.idle, .repeatingFires, false, .idle),

        Row(.running, .schedule, false, .running),
        Row(.running, .reschedule, true, .running),
        Row(.running, .suspend, true, .suspended),
        Row(.running, .resume, false, .running),
        Row(.running, .cancel, true, .cancelled),
        Row(.running, .oneShotFires, true, .idle),
        Row(.running, .repeatingFires, true, .running),

        Row(.suspended, .schedule, false, .suspended),
        Row(.suspended, .reschedule, true, .suspended),
        Row(.suspended, .suspend, false, .suspended),
        Row(.suspended, .resume, true, .running),
        Row(.suspended, .cancel, true, .cancelled),
        Row(.suspended, .oneShotFires, false, .suspended),
        Row(.suspended, .repeatingFires, false, .suspended),

        Row(.cancelled, .schedule, true, .running),
        Row(.cancelled, .reschedule, false, .cancelled),
        Row(.cancelled, .suspend, false, .cancelled),
        Row(.cancelled, .resume, false, .cancelled),
        Row(.cancelled, .cancel, false, .cancelled),
        Row(.cancelled, .oneShotFires, false, .cancelled),
        Row(.cancelled, .repeatingFires, false, .cancelled),
    ]

    /// What `operation` does to a timer in `state`.
    ///
    /// - Parameters:
    ///   - operation: The call or firing.
    ///   - state: The timer's state before it.
    /// - Returns: The row's outcome.
    public static func outcome(of operation: Operation, in state: SafeDispatchTimer.State) -> Outcome {
        guard let row = self.rows.first(where: { $0.state == state && $0.operation == operation }) else {
            preconditionFailure("TimerContract.rows has no row for \(operation) in \(state)")
        }
        return row.outcome
    }

    /// The table in Markdown, as the StateMachine article shows it: state, operation,
    /// result (`true` or `false` for a call, whether the handler runs for a firing) and the
    /// state that follows, one line per row.
    public static var markdownTable: String {
        let lines = self.rows.map { row in
            let result =
                row.operation.isCall
                ? "`\(row.outcome.accepted)`" : row.outcome.accepted ? "handler runs" : "nothing runs"
            return "| \(row.state) | \(self.label(row.operation)) | \(result) | \(row.outcome.state) |"
        }
        return (["| State | Operation | Result | New state |", "|---|---|---|---|"] + lines).joined(separator: "\n")
    }

    private static func label(_ operation: Operation) -> String {
        switch operation {
        case .schedule, .reschedule: "`\(operation)`"
        case .suspend, .resume, .cancel: "`\(operation)()`"
        case .oneShotFires: "a one-shot fires"
        case .repeatingFires: "a repeating timer fires"
        }
    }
}
