/// Runs an action when the last reference to it goes.
///
/// Captured by a timer's handler, it tells its owner that the timer let go of the handler:
/// a timer does so once it can no longer run it (a cancel, a one-shot's firing, its
/// engine's shutdown). An owner that ends its own wait on a firing or a cancel learns this
/// way of the one stop it did not ask for.
final class OnRelease: Sendable {
    private let action: @Sendable () -> Void

    init(_ action: @escaping @Sendable () -> Void) {
        self.action = action
    }

    deinit {
        self.action()
    }
}
