import Metronome
import MetronomeTesting
import Testing

/// Which tasks see a deadline: the task that set it and its structured children, which a
/// cancellation of that task reaches, and no other. An unstructured `Task {}` made in the
/// body inherits the body's task-local values, but the deadline never cancels it.
@Suite
struct DeadlineVisibilityTests {
    /// What a task reads of the deadlines in force.
    private struct Reading: Equatable {
        var active: Bool
        var expired: Bool
        var continuous: ContinuousClock.Instant?

        static var now: Reading {
            Reading(
                active: Task.hasActiveEngineDeadline, expired: Task.isEngineDeadlineExpired,
                continuous: Task.activeEngineDeadline(for: ContinuousClock()))
        }

        static let none = Reading(active: false, expired: false, continuous: nil)
    }

    /// Before the deadline passes and after: a `Task {}` and a `Task.detached` made in the
    /// body read no deadline, nor do the structured children of such a task.
    @Test(.timeLimit(.minutes(1)))
    func anUnstructuredTaskMadeInTheBodySeesNoDeadline() async throws {
        let timeline = ManualTimeline()
        let clock = EngineClock(backend: .custom(timeline), clock: .boottime)
        let release = AsyncGate()
        let (before, after, detached, childOfEscapee) = await withDeadline(clock.now + .seconds(5), clock: clock) {
            let before = await Task { Reading.now }.value
            let detached = await Task.detached { Reading.now }.value
            let childOfEscapee = await Task {
                await withTaskGroup(of: Reading.self) { group in
                    group.addTask { Reading.now }
                    return await group.next()!
                }
            }.value
            // Made before the deadline passes, read after it has cancelled this task.
            let escapee = Task {
                await release.wait()
                return Reading.now
            }
            timeline.advance(by: .seconds(5))
            #expect(Task.isCancelled && Task.isEngineDeadlineExpired)
            release.open()
            return (before, await escapee.value, detached, childOfEscapee)
        }
        #expect(before == .none)
        #expect(after == .none)
        #expect(detached == .none)
        #expect(childOfEscapee == .none)
    }

    /// A deadline set inside a `Task {}` made in another deadline's body runs under that
    /// task's own deadlines only: the outer one, though earlier, cannot cancel it.
    @Test(.timeLimit(.minutes(1)))
    func aDeadlineInAnUnstructuredTaskIsItsOwnOutermost() async throws {
        let outer = ContinuousClock.now + .seconds(60)
        let inner = outer + .seconds(60)
        let read = await withDeadline(outer) {
            await Task {
                await withDeadline(inner) { Task.activeEngineDeadline(for: ContinuousClock()) }
            }.value
        }
        #expect(read == inner)
    }

    /// Structured children, an `async let` and a task group's, see the deadline in force,
    /// and, once it has cancelled the task, that it has.
    @Test(.timeLimit(.minutes(1)))
    func structuredChildrenSeeTheDeadline() async throws {
        let timeline = ManualTimeline()
        let clock = EngineClock(backend: .custom(timeline), clock: .boottime)
        let deadline = clock.now + .seconds(5)
        let continuous = ContinuousClock().systemEpoch.advanced(by: .nanoseconds(deadline.nanoseconds))
        let (early, grouped, late) = await withDeadline(deadline, clock: clock) {
            async let early = Reading.now
            let grouped = await withTaskGroup(of: Reading.self) { group in
                group.addTask {
                    // A grandchild: a child of a child.
                    async let nested = Reading.now
                    return await nested
                }
                return await group.next()!
            }
            let firstRead = await early
            timeline.advance(by: .seconds(5))
            async let late = Reading.now
            return (firstRead, grouped, await late)
        }
        let inForce = Reading(active: true, expired: false, continuous: continuous)
        #expect(early == inForce)
        #expect(grouped == inForce)
        #expect(late == Reading(active: true, expired: true, continuous: continuous))
    }

    /// An instant between two nanoseconds is read back, and armed, at the later one: never
    /// before the instant the caller named.
    @Test(.timeLimit(.minutes(1)))
    func anInstantBetweenNanosecondsIsReadNoEarlier() async throws {
        let fraction = Duration(secondsComponent: 0, attosecondsComponent: 1)
        let continuous = ContinuousClock.now + .seconds(60) + fraction
        let suspending = SuspendingClock.now + .seconds(60) + fraction
        let (readContinuous, readSuspending) = await withDeadline(continuous) {
            await withDeadline(suspending, clock: SuspendingClock()) {
                (Task.activeEngineDeadline(for: ContinuousClock()), Task.activeEngineDeadline(for: SuspendingClock()))
            }
        }
        let continuousRead = try #require(readContinuous)
        let suspendingRead = try #require(readSuspending)
        #expect(continuousRead >= continuous && continuousRead < continuous + .nanoseconds(1))
        #expect(suspendingRead >= suspending && suspendingRead < suspending + .nanoseconds(1))
        // And an instant a whole nanosecond names is read as it is.
        let whole = ContinuousClock().systemEpoch.advanced(by: ContinuousClock().systemEpoch.duration(to: .now))
        let wholeDeadline = whole + .seconds(60)
        let readWhole = await withDeadline(wholeDeadline) { Task.activeEngineDeadline(for: ContinuousClock()) }
        #expect(readWhole == wholeDeadline)
    }
}

/// A one-time gate a task waits on without blocking a thread.
private final class AsyncGate: Sendable {
    private let opened = AsyncStream<Void>.makeStream()

    func wait() async {
        for await _ in self.opened.stream { return }
    }

    func open() {
        self.opened.continuation.yield()
        self.opened.continuation.finish()
    }
}
