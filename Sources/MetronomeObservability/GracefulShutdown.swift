#if ServiceLifecycle
import ServiceLifecycle
#endif

/// Runs `loop` until it ends or its task is cancelled, and with the `ServiceLifecycle` trait
/// also until a graceful shutdown begins: a service that runs an observability loop never
/// holds its group's shutdown up.
func untilGracefulShutdown(_ loop: @escaping @Sendable () async -> Void) async {
    #if ServiceLifecycle
    await cancelWhenGracefulShutdown(loop)
    #else
    await loop()
    #endif
}
