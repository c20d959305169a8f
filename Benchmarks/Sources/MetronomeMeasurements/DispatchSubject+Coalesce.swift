@preconcurrency import Dispatch

extension DispatchSubject: CoalesceSubject {
    /// Arms one one-shot dispatch source per deadline, with the configured leeway, on a serial queue.
    ///
    /// - Throws: ``MeasurementError/timedOut(backend:recorded:expected:)`` if not every timer
    ///   fires in time.
    public func run(
        _ config: CoalesceConfiguration,
        deadlines: [Int64],
        recorder: CoalesceRecorder
    ) throws
        -> SubjectCounters
    {
        let queue = DispatchQueue(label: "metronome.measurements.gcd.coalesce")
        let sources = SourceGroup()
        for deadline in deadlines {
            let source = sources.make(queue: queue)
            source.setEventHandler {
                recorder.record(deadlineNanoseconds: deadline, firedNanoseconds: MonotonicTime.now())
            }
            source.schedule(
                deadline: DispatchTime(uptimeNanoseconds: UInt64(deadline)),
                repeating: .never,
                leeway: .nanoseconds(Int(config.leewayNanoseconds))
            )
            source.activate()
        }
        let completed = recorder.waitUntilComplete(timeout: config.completionTimeout)
        sources.cancelAll()
        guard completed else {
            throw MeasurementError.timedOut(backend: self.name, recorded: recorder.firings, expected: deadlines.count)
        }
        return SubjectCounters(wakeups: nil, note: Self.leewayNote(config.leewayNanoseconds))
    }
}
