/// A one-way gate: threads block in ``pass(timeout:)`` until another thread opens it.
public final class Gate: Sendable {
    private let isOpen = LockedCondition(false)

    public init() {}

    /// Opens the gate for every thread waiting now and every one that comes later.
    public func open() {
        self.isOpen.update { $0 = true }
    }

    /// Blocks until the gate opens or `timeout` passes.
    ///
    /// - Returns: Whether the gate opened.
    @discardableResult
    public func pass(timeout: Duration = .seconds(10)) -> Bool {
        self.isOpen.wait(timeout: timeout) { $0 }
    }
}
