import Benchmark
import Dispatch
import Glibc
import Metronome
import NIOCore
import NIOPosix
import Synchronization

// A deadline around an async call, five ways with the same body, deadline and load: the
// body runs inline in the caller's task and returns at once, and the deadline (60 s) never
// passes. Four arm one timer that would cancel the caller's task (Metronome's helper, a GCD
// work item, a watchdog `Task`, NIO's `scheduleTask`); the fifth is the task-group idiom,
// which races the body against a sleep in two child tasks.

/// How long every deadline gives the body: far beyond any call, so it never fires.
private let deadlineTimeout = Duration.seconds(60)

/// The caller's task, for a baseline's timer to cancel while the call's scope is open, and
/// never after it closed: what `withDeadline` keeps with its own watch, so that every
/// baseline pays for one object and two atomic exchanges, as the helper does.
///
/// Unchecked: `UnsafeCurrentTask` is not `Sendable`, but `cancel()` is safe from any
/// thread, and the scope outlives every use of it (`close()` waits out a cancel under way).
private final class CallerCancellation: @unchecked Sendable {
    private static let open: UInt8 = 0
    private static let cancelling: UInt8 = 1
    private static let closed: UInt8 = 2

    private let task: UnsafeCurrentTask
    private let phase = Atomic<UInt8>(open)

    init(_ task: UnsafeCurrentTask) {
        self.task = task
    }

    /// The deadline passed: cancels the task unless the scope closed.
    func cancel() {
        guard
            self.phase.compareExchange(expected: Self.open, desired: Self.cancelling, ordering: .acquiringAndReleasing)
                .exchanged
        else { return }
        self.task.cancel()
        self.phase.store(Self.closed, ordering: .releasing)
    }

    /// The body ended: after this nothing touches the task.
    func close() {
        while !self.phase.compareExchange(expected: Self.open, desired: Self.closed, ordering: .acquiringAndReleasing)
            .exchanged
        {
            if self.phase.load(ordering: .acquiring) == Self.closed { return }
            sched_yield()
        }
    }
}

/// Runs `body` in the caller's task with the timer `arm` returns armed to cancel that
/// task, and `disarm`s it when `body` ends: the shape of `withDeadline`, with another
/// library's timer. The closures are not escaping, so they cost no allocation.
private func withCallerDeadline<Timer, Success>(
    arm: (CallerCancellation) -> Timer,
    disarm: (Timer) -> Void,
    _ body: () async throws -> Success
) async rethrows -> Success {
    // An async function always runs in a task.
    let cancellation = withUnsafeCurrentTask { CallerCancellation($0!) }
    let timer = arm(cancellation)
    defer {
        disarm(timer)
        cancellation.close()
    }
    return try await body()
}

/// The idiom a deadline helper replaces: the body and a `Task.sleep` race as two child
/// tasks of a group, and the first to finish cancels the other.
private func raceAgainstSleep<Success: Sendable>(
    _ timeout: Duration, _ body: @escaping @Sendable () async throws -> Success
) async throws -> Success {
    try await withThrowingTaskGroup(of: Success.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: timeout)
            throw CancellationError()
        }
        defer { group.cancelAll() }
        return try await group.next()!
    }
}

/// A deadline benchmark: `call` bounds a body that returns the iteration's index.
private func deadlineBenchmark(_ name: String, _ call: @escaping @Sendable (Int) async -> Int?) {
    Benchmark("Deadline: \(name)") { benchmark async in
        for index in benchmark.scaledIterations {
            blackHole(await call(index))
        }
    }
}

/// The body alone, called through an async closure as `withDeadline` calls it: what every
/// row pays before any deadline, so that a row's own cost is its time minus this one.
@inline(never)
private func withoutDeadline(_ body: nonisolated(nonsending) () async -> Int) async -> Int {
    await body()
}

func deadlineBenchmarks() {
    deadlineBenchmark("withDeadline (Metronome, shared engine)") { index in
        await withDeadline(in: deadlineTimeout) { index }
    }

    deadlineBenchmark("floor: the body with no deadline") { index in
        await withoutDeadline { index }
    }

    // A cancelled work item stays in GCD's timer list until its deadline, then does nothing.
    deadlineBenchmark("GCD work item cancelling the task") { index in
        await withCallerDeadline(
            arm: { cancellation in
                let item = DispatchWorkItem { cancellation.cancel() }
                DispatchQueue.global().asyncAfter(deadline: .now() + .seconds(60), execute: item)
                return item
            },
            disarm: { $0.cancel() }
        ) { index }
    }

    deadlineBenchmark("watchdog Task cancelling the task") { index in
        await withCallerDeadline(
            arm: { cancellation in
                Task {
                    try await Task.sleep(for: deadlineTimeout)
                    cancellation.cancel()
                }
            },
            disarm: { $0.cancel() }
        ) { index }
    }

    // From the caller's pool thread, as a server's async code arms it, on a loop of NIO's
    // shared group: NIO takes the loop's lock and may wake the loop.
    deadlineBenchmark("NIO scheduleTask cancelling the task") { index in
        await withCallerDeadline(
            arm: { cancellation in
                MultiThreadedEventLoopGroup.singleton.next().scheduleTask(in: .seconds(60)) { cancellation.cancel() }
            },
            disarm: { $0.cancel() }
        ) { index }
    }

    deadlineBenchmark("task group racing Task.sleep") { index in
        try? await raceAgainstSleep(deadlineTimeout) { index }
    }
}
