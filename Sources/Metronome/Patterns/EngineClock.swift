#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A `Clock` whose sleeps are timers on a ``TimerEngine`` (or any other backend).
///
/// `EngineClock` lets `async` code sleep with the engine's precision: each
/// ``sleep(until:tolerance:)`` arms one one-shot timer whose handler runs inline on the
/// engine's firing thread and resumes the sleeping task. The tolerance becomes the timer's
/// leeway, so sleeps with a tolerance can share wake-ups.
///
/// Instants are ``TimerInstant``s on the chosen ``TimerClock`` (monotonic by default, the
/// clock of `DispatchTime`), so a sleep never returns before the deadline as read on that
/// clock. Cancelling the sleeping task disarms the timer at once and throws
/// `CancellationError`; nothing is left armed.
///
/// ```swift
/// let clock = EngineClock()
/// try await Task.sleep(for: .milliseconds(5), tolerance: .microseconds(50), clock: clock)
///
/// // A drift-free 1 ms sequence (swift-async-algorithms):
/// for await instant in AsyncTimerSequence(interval: .milliseconds(1), clock: clock) {
///     render(at: instant)
/// }
/// ```
public struct EngineClock: Clock, Sendable {
    /// The duration type of the clock: `Swift.Duration`.
    public typealias Duration = Swift.Duration

    /// The instant type of the clock: nanoseconds on ``clock``.
    public typealias Instant = TimerInstant

    /// What arms each sleep's timer: an engine, GCD, or a test double.
    public let backend: SafeDispatchTimer.Backend

    /// The clock that instants are read from and deadlines armed on.
    public let clock: TimerClock

    /// Creates a clock that sleeps on `engine`, measuring time on `clock`.
    ///
    /// - Parameters:
    ///   - engine: The engine that arms the sleeps.
    ///   - clock: The clock of the instants; monotonic by default.
    @available(*, deprecated, message: "Use `init(backend: .engine(engine), clock:)`")
    public init(engine: TimerEngine, clock: TimerClock = .monotonic) {
        self.init(backend: .engine(engine), clock: clock)
    }

    /// Creates a clock whose sleeps are timers on `backend`, measuring time on `clock`.
    ///
    /// With `.custom(timeline)` (a `MetronomeTesting.ManualTimeline`) the clock reads
    /// virtual time and its sleeps end when the timeline is advanced past them.
    ///
    /// - Parameters:
    ///   - backend: What arms the sleeps; the shared engine by default.
    ///   - clock: The clock of the instants; monotonic by default.
    public init(backend: SafeDispatchTimer.Backend = .engine(.shared), clock: TimerClock = .monotonic) {
        self.backend = backend
        self.clock = clock
    }

    /// The current instant on ``clock``, as ``backend`` measures it.
    public var now: TimerInstant {
        self.backend.now(on: self.clock)
    }

    /// One nanosecond: the resolution of the engine's deadlines.
    public var minimumResolution: Duration {
        .nanoseconds(1)
    }

    /// Suspends the task until `deadline`, allowing the wake-up to be up to `tolerance` late.
    ///
    /// A deadline that has already passed returns at once, after checking for cancellation.
    /// Otherwise one one-shot ``SafeDispatchTimer`` is armed on ``backend`` with `tolerance`
    /// as its leeway; its handler resumes the task where the backend fires (for an engine,
    /// its firing thread). The task resumes no earlier than `deadline` as read on ``clock``.
    ///
    /// - Parameters:
    ///   - deadline: The instant to wake at, on ``clock``.
    ///   - tolerance: How late the wake-up may be, to share wake-ups; `nil` means none.
    /// - Throws: ``TimerError/invalidArgument`` for a deadline on another clock than
    ///   ``clock`` (an instant of `EngineClock()` slept on with `EngineClock(clock: .wall)`);
    ///   `CancellationError` if the task is cancelled before or during the sleep (the
    ///   timer is then disarmed by the time this returns); the ``TimerError`` with which the
    ///   backend declined the arming: `ESHUTDOWN` for an engine shut down,
    ///   `ENOMEM` when memory ran out; `ESHUTDOWN` (from `mtr_engine_stop`) when the engine
    ///   shuts down during the sleep.
    public func sleep(until deadline: TimerInstant, tolerance: Duration? = nil) async throws {
        guard deadline.clock == self.clock else {
            throw TimerError.wrongClock(deadline.clock, expected: self.clock, in: "sleep")
        }
        try Task.checkCancellation()
        if deadline <= self.now { return }
        let timer = SafeDispatchTimer(queue: nil, backend: self.backend, clock: self.clock)
        let sleep = SleepState()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                guard sleep.wait(continuation) else {
                    continuation.resume(throwing: CancellationError())
                    return
                }
                // A sleep that neither fired nor was cancelled when the timer lets go of its
                // handler was stopped by its engine's shutdown: it ends then, not never.
                let stopped = OnRelease {
                    sleep.finish(with: TimerError.engineShutDown)
                }
                // Held until a refusal has ended the sleep with the backend's own error.
                withExtendedLifetime(stopped) {
                    do {
                        // `false` only when closed by a cancellation that came first, which
                        // has ended the sleep already.
                        _ = try timer.start(at: deadline, leeway: tolerance ?? .zero) { _ in
                            withExtendedLifetime(stopped) { sleep.finish(with: nil) }
                        }
                    } catch {
                        sleep.finish(with: error)
                    }
                }
            }
        } onCancel: {
            let continuation = sleep.cancel()
            timer.close()
            continuation?.resume(throwing: CancellationError())
        }
    }
}

/// One sleep's continuation and how it ended, decided under one lock.
private final class SleepState: Sendable {
    private enum State {
        /// No continuation yet.
        case pending
        /// Waiting for the timer or a cancellation.
        case waiting(CheckedContinuation<Void, any Error>)
        /// Resumed by the timer (or an arming failure).
        case finished
        /// Resumed, or about to be, by cancellation.
        case cancelled
    }

    private let state = LockedBox(State.pending)

    /// Stores the continuation; `false` if the sleep was already cancelled.
    func wait(_ continuation: CheckedContinuation<Void, any Error>) -> Bool {
        self.state.withLockedValue { state in
            guard case .pending = state else { return false }
            state = .waiting(continuation)
            return true
        }
    }

    /// Ends the sleep from the timer's side, unless cancellation already did.
    func finish(with error: (any Error)?) {
        let continuation = self.state.withLockedValue { state -> CheckedContinuation<Void, any Error>? in
            guard case .waiting(let continuation) = state else { return nil }
            state = .finished
            return continuation
        }
        if let error {
            continuation?.resume(throwing: error)
        } else {
            continuation?.resume()
        }
    }

    /// Marks the sleep cancelled and returns the continuation to resume, if it is waiting.
    func cancel() -> CheckedContinuation<Void, any Error>? {
        self.state.withLockedValue { state in
            switch state {
            case .pending:
                state = .cancelled
                return nil
            case .waiting(let continuation):
                state = .cancelled
                return continuation
            case .finished, .cancelled:
                return nil
            }
        }
    }
}
