@preconcurrency import Dispatch
import Foundation
import MetronomeTesting
import Synchronization
import Testing

@testable import Metronome

/// The transition table, through the public API, on every harness.
@Suite(.serialized, .tags(.realTime))
struct SafeDispatchTimerTransitionTests {
    /// A state to start a table row from, and how the timer got there.
    enum Start: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case idle
        case idleAfterOneShot
        case running
        case suspended
        case cancelled

        var testDescription: String { self.rawValue }

        var state: SafeDispatchTimer.State {
            switch self {
            case .idle, .idleAfterOneShot: .idle
            case .running: .running
            case .suspended: .suspended
            case .cancelled: .cancelled
            }
        }
    }

    /// Every public call that can change the state.
    enum Call: String, CaseIterable, Sendable {
        case scheduleInterval, scheduleDeadline, scheduleAt, scheduleAfter
        case reschedule, rescheduleAfter, rescheduleAt
        case suspend, resume, cancel, cancelAndWait, cancelAndAwaitHandlers

        /// The calls that move the current schedule, keeping the original handler.
        var isReschedule: Bool {
            [.reschedule, .rescheduleAfter, .rescheduleAt].contains(self)
        }

        /// The contract's operation this call follows.
        var operation: TimerContract.Operation {
            switch self {
            case .scheduleInterval, .scheduleDeadline, .scheduleAt, .scheduleAfter: .schedule
            case .reschedule, .rescheduleAfter, .rescheduleAt: .reschedule
            case .suspend: .suspend
            case .resume: .resume
            case .cancel, .cancelAndWait, .cancelAndAwaitHandlers: .cancel
            }
        }

        /// What `TimerContract` says: the return value (`nil` for the calls that return
        /// nothing), the state right after the call, whether the call's new near deadline
        /// fires, and the state once it has.
        func expected(
            from start: SafeDispatchTimer.State
        ) -> (returns: Bool?, state: SafeDispatchTimer.State, fires: Bool, settled: SafeDispatchTimer.State) {
            let outcome = TimerContract.outcome(of: self.operation, in: start)
            let returns = [.cancelAndWait, .cancelAndAwaitHandlers].contains(self) ? nil : outcome.accepted
            // Only the schedule and reschedule calls bring a near deadline; the interval form
            // repeats, every other form (reschedule too) is a one-shot.
            let bringsDeadline = self.operation == .schedule || self.operation == .reschedule
            guard bringsDeadline, outcome.accepted, outcome.state == .running else {
                return (returns, outcome.state, false, outcome.state)
            }
            let firing: TimerContract.Operation = self == .scheduleInterval ? .repeatingFires : .oneShotFires
            return (returns, outcome.state, true, TimerContract.outcome(of: firing, in: outcome.state).state)
        }
    }

    /// Every call from every state: the return value and the state right after the call
    /// match `TimerContract`, and a rejected call changes nothing (its near deadline never
    /// fires, the old far one stays). All calls of one start state run side by side.
    @Test(.timeLimit(.minutes(1)), arguments: HarnessKind.allCases, Start.allCases)
    func everyCallInEveryStateMatchesTheTable(kind: HarnessKind, start: Start) async throws {
        let harness = try kind.make()
        defer { harness.tearDown() }
        let near = SafeDispatchTimerBehaviourTests.period
        let far = Duration.seconds(3600)

        struct Row {
            let call: Call
            let timer: SafeDispatchTimer
            let original: TickRecorder
            let replacement: TickRecorder
            var originalBefore = 0
        }
        let shared = Notifier()
        var rows: [Row] = []
        for call in Call.allCases {
            let original = TickRecorder(harness, notifier: shared)
            let timer = harness.makeTimer()
            switch start {
            case .idle:
                break
            case .idleAfterOneShot:
                #expect(timer.schedule(deadline: harness.deadline(after: .milliseconds(1)), handler: original.handler))
            case .running, .suspended, .cancelled:
                #expect(
                    timer.schedule(
                        deadline: harness.deadline(after: far), repeating: .seconds(3600), handler: original.handler))
                if start == .suspended { #expect(timer.suspend()) }
                if start == .cancelled { #expect(timer.cancel()) }
            }
            rows.append(
                Row(call: call, timer: timer, original: original, replacement: TickRecorder(harness, notifier: shared)))
        }
        if start == .idleAfterOneShot {
            #expect(harness.wait(for: shared) { rows.allSatisfy { $0.original.count == 1 } })
        }
        for index in rows.indices {
            rows[index].originalBefore = rows[index].original.count
            #expect(rows[index].timer.state == start.state, "\(rows[index].call): did not reach \(start)")
        }

        var firing: [Int] = []
        for (index, row) in rows.enumerated() {
            let expected = row.call.expected(from: start.state)
            let nearDeadline = harness.deadline(after: near)
            let returned: Bool?
            switch row.call {
            case .scheduleInterval:
                returned = row.timer.schedule(interval: near.inSeconds, handler: row.replacement.untimedHandler)
            case .scheduleDeadline:
                returned = row.timer.schedule(deadline: nearDeadline, handler: row.replacement.handler)
            case .scheduleAt:
                returned = row.timer.schedule(at: harness.now.advanced(by: near), handler: row.replacement.handler)
            case .scheduleAfter:
                returned = row.timer.schedule(after: near, handler: row.replacement.handler)
            case .reschedule:
                returned = row.timer.reschedule(deadline: nearDeadline)
            case .rescheduleAfter:
                returned = row.timer.reschedule(after: near)
            case .rescheduleAt:
                returned = row.timer.reschedule(at: harness.now.advanced(by: near))
            case .suspend:
                returned = row.timer.suspend()
            case .resume:
                returned = row.timer.resume()
            case .cancel:
                returned = row.timer.cancel()
            case .cancelAndWait:
                SafeDispatchTimerBehaviourTests.cancelAndWait(row.timer)
                returned = nil
            case .cancelAndAwaitHandlers:
                await row.timer.cancelAndAwaitHandlers()
                returned = nil
            }
            #expect(returned == expected.returns, "\(start) → \(row.call) returned \(String(describing: returned))")
            let stateNow = row.timer.state
            #expect(stateNow == expected.state, "\(start) → \(row.call) left \(stateNow)")
            if expected.fires { firing.append(index) }
        }

        // Let the near deadlines pass: exactly the accepted calls fire.
        let firingRows = firing.map { rows[$0] }
        let arrived = harness.wait(for: shared) {
            firingRows.allSatisfy { row in
                row.call.isReschedule ? row.original.count > row.originalBefore : row.replacement.count >= 1
            }
        }
        #expect(arrived, "not every accepted call fired")
        harness.advance(by: near * 2)

        for row in rows {
            let expected = row.call.expected(from: start.state)
            let newFires = row.replacement.count
            let oldFires = row.original.count - row.originalBefore
            switch (row.call, expected.fires) {
            case (let call, true) where call.isReschedule:
                #expect(oldFires == 1, "\(start) → \(call): the moved deadline fired \(oldFires) times")
            case (.scheduleInterval, true):
                #expect(newFires >= 1, "\(start) → \(row.call) never fired")
            case (_, true):
                #expect(newFires == 1, "\(start) → \(row.call) fired \(newFires) times")
            case (_, false):
                #expect(
                    newFires == 0 && oldFires == 0, "\(start) → \(row.call) fired (new \(newFires), old \(oldFires))")
            }
            #expect(row.timer.state == expected.settled, "\(start) → \(row.call) ended \(row.timer.state)")
            row.timer.cancel()
        }
        if let armed = harness.armedCount {
            #expect(armed == 0, "timers left armed after every row was cancelled")
        }
    }

    /// A deadline at the very start of a clock (0 or 1 ns, which GCD's wall time reads as
    /// "forever") is long past: it fires at once on every clock of every real backend.
    @Test(
        .timeLimit(.minutes(1)),
        arguments: [HarnessKind.engine, .dispatch], [TimerClock.monotonic, .boottime, .wall])
    func aDeadlineAtTheClocksStartFiresAtOnce(kind: HarnessKind, clock: TimerClock) throws {
        let backend: SafeDispatchTimer.Backend = kind == .dispatch ? .dispatch : .engine(.shared)
        for nanoseconds: Int64 in [0, 1, 2] {
            let fired = Atomic<Int>(0)
            let timer = SafeDispatchTimer(backend: backend, clock: clock)
            let deadline = TimerInstant(nanoseconds: nanoseconds, clock: clock)
            #expect(timer.schedule(at: deadline) { _ in fired.add(1, ordering: .relaxed) })
            #expect(eventually { fired.load(ordering: .relaxed) == 1 }, "\(kind) \(clock) at \(nanoseconds) ns")
            #expect(timer.state == .idle)
        }
    }
}
