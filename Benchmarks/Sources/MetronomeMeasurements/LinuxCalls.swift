import Glibc

/// The Linux calls that the `Glibc` module does not import, resolved from the C library
/// already loaded into the process.
///
/// SwiftGlibc leaves out `<sys/timerfd.h>` and `<sys/prctl.h>`, and declares `gettid` only
/// under `_GNU_SOURCE`. A C shim would need a target of its own; looking the symbols up once
/// keeps this module pure Swift. `prctl` is variadic in C: it is called through a fixed
/// prototype, which is ABI-compatible for integer arguments on x86_64 and arm64 Linux.
enum LinuxCalls {
    /// `TFD_TIMER_ABSTIME`: the itimerspec's `it_value` is an absolute time on the fd's clock.
    static let timerAbsolute: CInt = 1
    /// `TFD_CLOEXEC`, defined by the kernel as `O_CLOEXEC`.
    static let timerfdCloseOnExec: CInt = O_CLOEXEC
    /// `PR_GET_TIMERSLACK` from `<linux/prctl.h>`.
    static let getTimerSlack: CInt = 30

    /// `int timerfd_create(int clockid, int flags)`.
    static let timerfdCreate = symbol("timerfd_create", as: (@convention(c) (CInt, CInt) -> CInt).self)
    /// `int timerfd_settime(int fd, int flags, const struct itimerspec *new, struct itimerspec *old)`.
    static let timerfdSetTime = symbol(
        "timerfd_settime",
        as: (@convention(c) (CInt, CInt, UnsafePointer<itimerspec>, UnsafeMutablePointer<itimerspec>?) -> CInt).self
    )
    /// `pid_t gettid(void)`: the kernel thread id, as listed under `/proc/self/task`.
    static let gettid = symbol("gettid", as: (@convention(c) () -> pid_t).self)
    /// `int prctl(int option, unsigned long arg2, unsigned long arg3, unsigned long arg4, unsigned long arg5)`.
    static let prctl = symbol("prctl", as: (@convention(c) (CInt, UInt, UInt, UInt, UInt) -> CInt).self)

    private static func symbol<Function>(_ name: String, as type: Function.Type) -> Function {
        // RTLD_DEFAULT semantics: search the global scope, where libc is always loaded.
        guard let address = dlsym(dlopen(nil, RTLD_NOW), name) else {
            fatalError("the C library has no \(name); Metronome needs glibc 2.30 or later")
        }
        return unsafeBitCast(address, to: type)
    }
}
