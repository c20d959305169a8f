internal import CMeasurements
import MetronomeTestSupport

extension PosixThread {
    /// Starts a thread running `body` on `cpu` only, from its first instruction; `nil` for
    /// any CPU.
    ///
    /// - Throws: ``MeasurementError/systemCall(_:code:)`` when the CPU is refused (`EINVAL`
    ///   for one the process may not use) or `pthread_create` fails.
    public static func spawn(cpu: Int?, _ body: @escaping @Sendable () -> Void) throws(MeasurementError) -> PosixThread
    {
        do {
            guard let cpu else { return try PosixThread.spawn(body) }
            return try PosixThread.spawn(
                configuring: { attributes throws(SystemCallError) in
                    let code = cmeasurements_attr_pin(&attributes, CInt(clamping: cpu))
                    if code != 0 { throw SystemCallError(call: "pthread_attr_setaffinity_np", code: code) }
                },
                body)
        } catch {
            throw MeasurementError(error)
        }
    }
}
