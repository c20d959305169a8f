// A stand-in for the standard's `withDeadline` (SE-0526), with the proposal's signatures,
// so that the snippets and the client are compiled beside it as they will be when a
// toolchain ships it: an unqualified call that became ambiguous would fail to build here.
// Every form records that it ran, so the client can tell which function a call picked.
import Synchronization

public let standardCalls = Atomic<Int>(0)

// The proposal adds these conformances to the standard library; a stand-in must declare them.
// swift-format-ignore: AvoidRetroactiveConformances
extension ContinuousClock: @retroactive Identifiable {
    public var id: Int { 0 }
}

// swift-format-ignore: AvoidRetroactiveConformances
extension SuspendingClock: @retroactive Identifiable {
    public var id: Int { 1 }
}

nonisolated(nonsending) public func withDeadline<Return: ~Copyable, Failure: Error, C: Clock & Identifiable>(
    _ expiration: C.Instant,
    tolerance: C.Instant.Duration? = nil,
    clock: C = ContinuousClock(),
    body: nonisolated(nonsending) () async throws(Failure) -> Return
) async throws(Failure) -> Return {
    standardCalls.add(1, ordering: .relaxed)
    return try await body()
}

nonisolated(nonsending) public func withDeadline<Return: ~Copyable, Failure: Error, C: Clock & Identifiable>(
    in timeout: C.Instant.Duration,
    tolerance: C.Instant.Duration? = nil,
    clock: C = ContinuousClock(),
    body: nonisolated(nonsending) () async throws(Failure) -> Return
) async throws(Failure) -> Return {
    standardCalls.add(1, ordering: .relaxed)
    return try await body()
}

nonisolated(nonsending) public func withDeadline<Return: ~Copyable, Failure: Error>(
    in timeout: ContinuousClock.Instant.Duration,
    tolerance: ContinuousClock.Instant.Duration? = nil,
    body: nonisolated(nonsending) () async throws(Failure) -> Return
) async throws(Failure) -> Return {
    standardCalls.add(1, ordering: .relaxed)
    return try await body()
}
