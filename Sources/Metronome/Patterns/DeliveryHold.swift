/// A backend whose time must stand still while work that a firing handed to a queue is
/// pending: a virtual timeline that moves itself on when all it can see is idle
/// (`MetronomeTesting`'s `ManualTimeline.run`), and cannot see a queue.
package protocol DeliveryHoldingBackend: TimerBackend {
    /// Holds time still for one delivery.
    ///
    /// - Returns: What to call once the delivery has run (and resumed whoever waited for it).
    func holdForDelivery() -> @Sendable () -> Void
}
