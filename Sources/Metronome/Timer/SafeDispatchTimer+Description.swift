extension SafeDispatchTimer: CustomStringConvertible, CustomDebugStringConvertible {
    /// The timer's state, backend and clock, such as
    /// `SafeDispatchTimer(running, engine, monotonic)`.
    public var description: String {
        "SafeDispatchTimer(\(self.state), \(self.backend), \(self.clock))"
    }

    /// The description plus the current schedule, such as
    /// `SafeDispatchTimer(state: running, backend: engine, clock: monotonic, schedule:
    /// at 5000000 ns every 1000000 ns, leeway 0 ns)`.
    public var debugDescription: String {
        let schedule = self.currentSchedule.map { "\($0)" } ?? "none"
        return
            "SafeDispatchTimer(state: \(self.state), backend: \(self.backend), clock: \(self.clock), schedule: \(schedule))"
    }
}

extension SafeDispatchTimer.Backend: CustomStringConvertible {
    /// The kind of backend: `engine`, `dispatch`, or `custom(` and the backend's type `)`;
    /// `engine (GCD)` when the library is built without the `Engine` trait.
    public var description: String {
        switch self {
        #if Engine
        case .engine: "engine"
        #else
        case .engine: "engine (GCD)"
        #endif
        case .dispatch: "dispatch"
        case .custom(let backend): "custom(\(type(of: backend)))"
        }
    }
}
