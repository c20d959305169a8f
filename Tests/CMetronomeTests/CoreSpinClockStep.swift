#if Engine
// A wall-clock step as the firing thread's spin sees it, without setting the machine's
// clock: the C core reads a spin's clock through `mtr_clock_spin_for_testing_`, a weak
// reference that this definition fills (mtr_clock.h). Idle, it hands every reading back.
import CMetronome
import Glibc
import Synchronization

/// One step at a time: the thread whose spin sees it, where it begins on the wall clock,
/// and how far back it goes.
enum SpinClockStep {
    /// The stepped thread's `pthread_t`, or 0 when no step is set.
    fileprivate static let thread = Atomic<UInt>(0)
    fileprivate static let from = Atomic<Int64>(0)
    fileprivate static let back = Atomic<Int64>(0)
    /// Spin readings the step changed since it was set.
    static let stepped = Atomic<Int>(0)

    /// From wall-clock reading `from` on, the spins of `thread` read the wall clock `back`
    /// nanoseconds behind.
    static func set(thread: pthread_t, from: Int64, back: Int64) {
        self.from.store(from, ordering: .relaxed)
        self.back.store(back, ordering: .relaxed)
        self.stepped.store(0, ordering: .relaxed)
        self.thread.store(thread, ordering: .releasing)
    }

    static func clear() { self.thread.store(0, ordering: .releasing) }
}

@_cdecl("mtr_clock_spin_for_testing_")
func spinClockReading(_ clock: Int32, _ ns: Int64) -> Int64 {
    let thread = SpinClockStep.thread.load(ordering: .acquiring)
    guard thread != 0, clock == Int32(bitPattern: mtr_clock_id.MTR_CLOCK_REALTIME.rawValue),
        pthread_equal(thread, pthread_self()) != 0, ns >= SpinClockStep.from.load(ordering: .relaxed)
    else { return ns }
    SpinClockStep.stepped.add(1, ordering: .relaxed)
    return ns - SpinClockStep.back.load(ordering: .relaxed)
}

/// CPU time a thread of this process has used, in nanoseconds.
func cpuTime(of thread: pthread_t) -> Int64 {
    var clock = clockid_t()
    var ts = timespec()
    guard pthread_getcpuclockid(thread, &clock) == 0, clock_gettime(clock, &ts) == 0 else { return -1 }
    return Int64(ts.tv_sec) * Time.s + Int64(ts.tv_nsec)
}
#endif
