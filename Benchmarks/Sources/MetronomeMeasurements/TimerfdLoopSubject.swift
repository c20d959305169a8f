internal import CMeasurements
import Glibc
import Synchronization

/// The kernel's floor: each timer is a periodic timerfd read by a thread of its own.
///
/// Every timer gets a dedicated thread blocked in `read(2)` on a timerfd on the run's clock, armed
/// once with an absolute first deadline (`TFD_TIMER_ABSTIME`) and the interval, so the kernel
/// keeps the absolute schedule itself. A read returns the expirations since the last one: one
/// is the firing, the rest are missed deadlines. Nothing sits between the kernel's hrtimer and
/// the handler, which makes this the reference the other backends are compared with.
///
/// One thread per timer, rather than one thread multiplexing every timerfd, keeps the path
/// minimal (no `epoll`, no dispatch); with several timers and handler work it gives this
/// backend parallelism a single firing thread lacks, so compare multi-timer runs with that in
/// mind. Wake-ups are counted as reads, one per thread wake-up.
public struct TimerfdLoopSubject: JitterSubject {
    /// `"timerfd"`.
    public let name = "timerfd"
    /// The CPU every timer's thread runs on, or `nil` for any.
    public let cpu: Int?

    /// Creates the subject.
    ///
    /// - Parameter cpu: A CPU to pin every timer's thread to, or `nil` for any.
    public init(cpu: Int? = nil) {
        self.cpu = cpu
    }

    /// Runs one timerfd thread per timer until `recorder` is complete.
    ///
    /// - Throws: ``MeasurementError/systemCall(_:code:)`` if a timerfd or thread cannot be
    ///   created, ``MeasurementError/timedOut(backend:recorded:expected:)`` if the recorder
    ///   does not complete in time.
    public func run(_ config: JitterConfiguration, recorder: LatencyRecorder) throws -> SubjectCounters {
        let run = Run(config: config, start: config.start(), cpu: self.cpu)
        defer { run.tearDown() }
        for timer in 0..<config.timers {
            try run.addTimer(timer, recorder: recorder)
        }
        guard recorder.waitUntilComplete(timeout: config.completionTimeout) else {
            throw MeasurementError.timedOut(
                backend: self.name,
                recorded: recorder.summary.samples,
                expected: recorder.target
            )
        }
        run.tearDown()
        let note =
            config.timers > 1 ? "timerfd: one thread per timer, so handlers of different timers run in parallel" : nil
        return SubjectCounters(wakeups: run.reads.load(ordering: .relaxed), note: note)
    }

    /// The timerfds and threads of one run.
    private final class Run: Sendable {
        let config: JitterConfiguration
        let start: Int64
        let cpu: Int?
        let stopRequested = Atomic<Bool>(false)
        let reads = Atomic<Int>(0)
        private let timers = LockedCondition<[(fd: CInt, thread: PosixThread?)]>([])

        init(config: JitterConfiguration, start: Int64, cpu: Int?) {
            self.config = config
            self.start = start
            self.cpu = cpu
        }

        func addTimer(_ timer: Int, recorder: LatencyRecorder) throws(MeasurementError) {
            // Blocking on purpose: the thread sleeps in read(2) until the next expiration.
            let fd = timerfd_create(self.config.clock.id, CInt(TFD_CLOEXEC))
            guard fd >= 0 else { throw .systemCall("timerfd_create", code: errno) }
            let index = self.timers.withLock { timers in
                timers.append((fd, nil))
                return timers.count - 1
            }
            var schedule = itimerspec(
                it_interval: timespec(nanoseconds: self.config.intervalNanoseconds),
                it_value: timespec(nanoseconds: self.config.deadline(timer: timer, tick: 0, start: self.start))
            )
            guard timerfd_settime(fd, CInt(TFD_TIMER_ABSTIME), &schedule, nil) == 0 else {
                throw .systemCall("timerfd_settime", code: errno)
            }
            let thread = try PosixThread.spawn(cpu: self.cpu) {
                self.readLoop(fd: fd, timer: timer, recorder: recorder)
            }
            self.timers.withLock { $0[index].thread = thread }
        }

        private func readLoop(fd: CInt, timer: Int, recorder: LatencyRecorder) {
            var tick: Int64 = 0
            var reads = 0
            var expirations: UInt64 = 0
            while true {
                let count = read(fd, &expirations, MemoryLayout<UInt64>.size)
                let fired = self.config.clock.now()
                if count < 0 && errno == EINTR { continue }
                guard count == MemoryLayout<UInt64>.size, !self.stopRequested.load(ordering: .relaxed) else { break }
                reads += 1
                recorder.record(
                    scheduledNanoseconds: self.config.deadline(timer: timer, tick: tick, start: self.start),
                    firedNanoseconds: fired,
                    missed: Int(expirations) - 1
                )
                tick += Int64(expirations)
                MonotonicTime.spin(nanoseconds: self.config.handlerWorkNanoseconds)
            }
            self.reads.add(reads, ordering: .relaxed)
        }

        /// Stops and joins every thread and closes every timerfd; a second call does nothing.
        func tearDown() {
            self.stopRequested.store(true, ordering: .relaxed)
            let timers = self.timers.withLock { timers in
                defer { timers = [] }
                return timers
            }
            // A blocked read only returns on an expiration, so each timer is re-armed to expire
            // at once; the thread then sees the stop request and exits.
            var now = itimerspec(it_interval: timespec(), it_value: timespec(tv_sec: 0, tv_nsec: 1))
            for timer in timers {
                _ = timerfd_settime(timer.fd, 0, &now, nil)
            }
            for timer in timers {
                timer.thread?.join()
                close(timer.fd)
            }
        }
    }
}

extension timespec {
    /// A timespec holding `nanoseconds`, which must not be negative.
    init(nanoseconds: Int64) {
        self.init(tv_sec: Int(nanoseconds / 1_000_000_000), tv_nsec: Int(nanoseconds % 1_000_000_000))
    }
}
