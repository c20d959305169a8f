#if Engine
// A descriptor that fails under an engine, because someone else closed it, is a fault the
// engine reports and survives: it stops itself, releases every context, answers ESHUTDOWN and
// names the error in its info. The process goes on.
import CMetronome
import Glibc
import Synchronization
import Testing

/// What the raw callbacks of the fault test share with it.
private enum Faulting {
    static let releases = Atomic<Int>(0)
}

extension CoreContractTests {
    @Suite(.serialized, .tags(.realTime))
    struct Fault {
        /// In a forked child, where no other thread opens descriptors: the engine's
        /// monotonic timerfd is closed behind its back, then a timer is armed on that clock.
        @Test(
            .disabled(if: Bounds.threadSanitized, "TSan does not support threads after a multi-threaded fork"))
        func aTimerfdClosedUnderTheEngineStopsItWithTheError() {
            _ = Faulting.releases.load(ordering: .relaxed)  // made here: the child runs no lazy initializer
            let code = exitCodeOfChild {
                let before = Self.timerfds(onClock: CLOCK_MONOTONIC)
                var config = mtr_engine_config()
                mtr_engine_config_init(&config)
                config.on_fire = { _, _ in }
                config.on_release = { context in
                    if context != nil { Faulting.releases.add(1, ordering: .relaxed) }
                }
                var engine: OpaquePointer?
                guard mtr_engine_create(&config, &engine) == 0, let engine else { return 2 }
                let mine = Self.timerfds(onClock: CLOCK_MONOTONIC).filter { !before.contains($0) }
                // The engine's monotonic timerfd, and its standby's alarm.
                guard !mine.isEmpty else { return 3 }
                for fd in mine { close(fd) }

                var id: mtr_timer_id = 0
                guard mtr_timer_create(engine, UnsafeMutableRawPointer(bitPattern: 1), &id) == 0 else { return 4 }
                _ = mtr_timer_arm_once(engine, id, .MTR_CLOCK_MONOTONIC, Time.monotonic() + Time.ms, 0)
                var info = mtr_engine_info()
                let stopped = eventually(timeout: .nanoseconds(Bounds.patienceNs)) {
                    mtr_engine_get_info(engine, &info)
                    var other: mtr_timer_id = 0
                    return info.fault != 0 && mtr_timer_create(engine, nil, &other) == ESHUTDOWN
                        && Faulting.releases.load(ordering: .relaxed) == 1
                }
                guard stopped else { return 5 }
                guard info.fault == EBADF else { return 6 }
                mtr_engine_destroy(engine)
                return 0
            }
            #expect(code == 0)
        }

        /// The timerfds open in this process on `clock`, by their `/proc` entries.
        static func timerfds(onClock clock: clockid_t) -> [Int32] {
            var found: [Int32] = []
            var text = [CChar](repeating: 0, count: 512)
            let marker = "clockid: \(clock)\n"
            for fd in Int32(0)..<1024 {
                let length = readlink("/proc/self/fd/\(fd)", &text, text.count - 1)
                guard length > 0 else { continue }
                text[length] = 0
                guard strcmp(text, "anon_inode:[timerfd]") == 0 else { continue }
                let info = open("/proc/self/fdinfo/\(fd)", O_RDONLY)
                guard info >= 0 else { continue }
                let read = Glibc.read(info, &text, text.count - 1)
                close(info)
                guard read > 0 else { continue }
                text[read] = 0
                if strstr(text, marker) != nil { found.append(fd) }
            }
            return found
        }
    }
}
#endif
