import Glibc
import MetronomeTestSupport

/// A forked child of a stress run, waited for with a bound: a fault that hangs the library
/// becomes a counted violation, not a hung run.
enum StressChild {
    /// How long a child may take before it is killed and counted as hung.
    static let bound: Int64 = 10_000_000_000

    /// Forks, runs `body` in the child and `_exit`s with its code, and waits for the child.
    ///
    /// - Returns: `nil` for a clean exit (or no process to spare, which is not the
    ///   library's fault); otherwise how the child ended, for a violation's description.
    static func run(_ body: () -> Int32) -> String? {
        let pid = fork()
        if pid == 0 { _exit(body()) }
        guard pid > 0 else { return nil }
        return self.reap(pid)
    }

    /// Waits for `pid` at most ``bound``, then kills it.
    ///
    /// - Returns: `nil` for exit status 0, else the signal, the exit code and, for a child
    ///   killed for its time, what its threads were doing (asleep in a futex is a hang,
    ///   running is a slow machine).
    static func reap(_ pid: pid_t) -> String? {
        var status: Int32 = 0
        var threads = ""
        let deadline = MonotonicTime.now() + Self.bound
        while waitpid(pid, &status, WNOHANG) == 0 {
            if MonotonicTime.now() > deadline {
                threads = " after \(Self.bound / 1_000_000_000) s (threads: \(KernelThread.states(ofProcess: pid)))"
                kill(pid, SIGKILL)
                waitpid(pid, &status, 0)
                break
            }
            usleep(1_000)
        }
        let signal = status & 0x7f
        let code = (status >> 8) & 0xff
        return signal == 0 && code == 0 ? nil : "child ended with signal \(signal), exit \(code)\(threads)"
    }
}
