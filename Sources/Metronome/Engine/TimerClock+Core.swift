#if Engine
internal import CMetronome

extension TimerClock {
    /// The C core's name for this clock.
    var coreClock: mtr_clock_id {
        switch self {
        case .monotonic: .MTR_CLOCK_MONOTONIC
        case .boottime: .MTR_CLOCK_BOOTTIME
        case .wall: .MTR_CLOCK_REALTIME
        }
    }
}
#endif
