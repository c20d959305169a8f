import Synchronization

/// Counts objects that must all be released by the end of a run.
final class StressLiveObjects: Sendable {
    private let live = Atomic<Int>(0)
    private let created = Atomic<Int>(0)

    func retain() {
        self.live.add(1, ordering: .relaxed)
        self.created.add(1, ordering: .relaxed)
    }

    func release() {
        self.live.subtract(1, ordering: .relaxed)
    }

    var liveCount: Int { self.live.load(ordering: .acquiring) }
    var createdCount: Int { self.created.load(ordering: .relaxed) }
}

/// What one `schedule` call's handler closure carries: its token and what it has seen.
///
/// Counted in ``StressLiveObjects``, so a closure the library never releases shows up at the
/// end. The mutable fields are touched only under the owning timer's shadow lock.
final class StressHandlerContext: @unchecked Sendable {
    /// Unique per schedule call.
    let token: UInt64
    let repeating: Bool
    private let live: StressLiveObjects

    /// Handler entries so far.
    var entries = 0
    /// The arming the last tick came from (`scheduled − sequence · period`, period).
    var lastArming: StressGrid?
    var lastSequence: UInt64 = 0

    init(token: UInt64, repeating: Bool, live: StressLiveObjects) {
        self.token = token
        self.repeating = repeating
        self.live = live
        live.retain()
    }

    deinit {
        self.live.release()
    }
}
