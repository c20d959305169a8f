/// A timer's calls into the seam that fires it, which its core keeps as an opaque object:
/// every seam is the engine or a public backend's armings, told apart by the object's class
/// and reached without a retain or a dynamic cast.
extension TimerCore {
    /// An idle core fired by `firing`.
    static func make(delivery: HandlerDelivery?, firing: any TimerFiring, clock: TimerClock) -> TimerCore {
        Self.make(delivery: delivery, seam: firing as AnyObject, clock: clock)
    }

    /// What fires this timer.
    var firing: any TimerFiring {
        self.withSeam {
            $0
        } armings: {
            $0
        }
    }

    /// Calls `engine` or `armings` with the seam, which the core keeps alive meanwhile.
    @inline(__always)
    private func withSeam<Result>(engine: (TimerEngine) -> Result, armings: (BackendArmings) -> Result) -> Result {
        let seam = self.seam
        let object = seam._withUnsafeGuaranteedRef { ObjectIdentifier(type(of: $0)) }
        if object == ObjectIdentifier(TimerEngine.self) {
            return Unmanaged<TimerEngine>.fromOpaque(seam.toOpaque())._withUnsafeGuaranteedRef(engine)
        }
        return Unmanaged<BackendArmings>.fromOpaque(seam.toOpaque())._withUnsafeGuaranteedRef(armings)
    }

    /// The current time on this timer's clock, as its seam measures it.
    func now() -> Int64 {
        let clock = self.clock
        return self.withSeam {
            $0.now(clock)
        } armings: {
            $0.now(clock)
        }
    }

    /// Arms `schedule` in place of the arming `previous` (0 for none); see
    /// ``TimerFiring/arm(_:clock:for:replacing:)``.
    func seamArm(_ schedule: TimerSchedule, replacing previous: UInt64) throws(TimerError) -> UInt64 {
        let clock = self.clock
        let previous = previous == 0 ? nil : previous
        // Typed throws do not pass through the guaranteed reference's closure: a result does.
        return try self.withSeam { seam in
            Result { () throws(TimerError) -> UInt64 in
                try seam.arm(schedule, clock: clock, for: self, replacing: previous)
            }
        } armings: { seam in
            Result { () throws(TimerError) -> UInt64 in
                try seam.arm(schedule, clock: clock, for: self, replacing: previous)
            }
        }.get()
    }

    func seamDisarm(_ arming: UInt64) {
        self.withSeam {
            $0.disarm(arming)
        } armings: {
            $0.disarm(arming)
        }
    }

    func seamRetire(_ arming: UInt64) {
        self.withSeam {
            $0.retire(arming)
        } armings: {
            $0.retire(arming)
        }
    }

    /// The seam let go of this timer, unlocked (see ``released(seamStopped:)``).
    func released() {
        self.released(
            seamStopped: self.withSeam {
                $0.hasStopped
            } armings: {
                $0.hasStopped
            })
    }
}
