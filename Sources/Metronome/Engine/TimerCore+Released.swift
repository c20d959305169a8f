/// What an engine tells the timers it fires.
extension TimerCore {
    /// The engine let go of this timer, unlocked (see ``released(seamStopped:)``): called
    /// only by the engine that fires it, which is therefore its seam.
    func released() {
        assert(self.seam._withUnsafeGuaranteedRef { $0 is TimerEngine })
        let engine = Unmanaged<TimerEngine>.fromOpaque(self.seam.toOpaque())
        self.released(seamStopped: engine._withUnsafeGuaranteedRef { $0.hasStopped })
    }
}
