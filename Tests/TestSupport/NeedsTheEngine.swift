import Testing

/// Whether the library under test was built with its engine (the trait `Engine`, on by
/// default). Without it, GCD fires every timer.
public let isEngineCompiledIn: Bool = {
    #if Engine
    true
    #else
    false
    #endif
}()

extension Trait where Self == ConditionTrait {
    /// Skips a test of what only the engine does (counters other than `armed`,
    /// coalescing, thread settings, descriptors, forks) where the engine is compiled out,
    /// saying why.
    public static func needsTheEngine(_ reason: Comment) -> Self {
        .enabled(if: isEngineCompiledIn, reason)
    }
}
