import ArgumentParser
@preconcurrency import Dispatch
import Glibc
import Metronome
import MetronomeMeasurements

/// The scheduling policy of a measuring thread, named as cyclictest's `--policy` names it.
enum SchedulingPolicy: String, ExpressibleByArgument, CaseIterable, Codable, Sendable {
    case fifo
    case rr
    case other

    /// The `SCHED_*` constant.
    var value: CInt {
        switch self {
        case .fifo: SCHED_FIFO
        case .rr: SCHED_RR
        case .other: SCHED_OTHER
        }
    }

    /// An engine whose firing thread runs under this policy at `priority`, on `cpu` if given.
    ///
    /// The engine itself asks only for `SCHED_FIFO`; for the other policies the firing
    /// thread switches itself, from an inline handler (which runs on that thread), so the
    /// library needs no knob for a measurement-only setting.
    ///
    /// - Returns: The engine, or why the policy was refused.
    /// - Throws: The engine's error, or the refusal of `cpu`.
    func engine(priority: Int, cpu: Int?) throws -> Result<TimerEngine, MeasurementError> {
        if self == .fifo {
            let engine = try TimerEngine.pinned(.init(realtimePriority: priority, cpu: cpu))
            if let refusal = engine.threadReport.realtimeRefusal {
                return .failure(.systemCall("SCHED_FIFO", code: refusal.code))
            }
            return .success(engine)
        }
        let engine = try TimerEngine.pinned(.init(cpu: cpu))
        let outcome = LockedCondition<CInt?>(nil)
        let timer = SafeDispatchTimer(backend: .engine(engine))
        let policy = self.value
        timer.schedule(deadline: .now()) { _ in
            var parameters = sched_param(sched_priority: CInt(priority))
            let rc = pthread_setschedparam(pthread_self(), policy, &parameters)
            outcome.withLock { $0 = rc }
            outcome.broadcast()
        }
        guard outcome.wait(timeout: .seconds(5), until: { $0 != nil }) else {
            return .failure(.timedOut(backend: "engine-rt", recorded: 0, expected: 1))
        }
        let rc = outcome.withLock { $0 } ?? 0
        return rc == 0 ? .success(engine) : .failure(.systemCall("SCHED_\(self.rawValue.uppercased())", code: rc))
    }
}

extension TimerEngine {
    /// An engine with `configuration`, whose firing thread is on the configuration's CPU.
    ///
    /// - Throws: The engine's error, or the refusal of the CPU: a measuring thread that asked
    ///   for a CPU and runs elsewhere would be reported under the wrong one.
    static func pinned(_ configuration: Configuration) throws -> TimerEngine {
        let engine = try TimerEngine(configuration: configuration)
        if let refusal = engine.threadReport.cpuRefusal { throw refusal }
        return engine
    }
}
