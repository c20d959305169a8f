import Foundation
import Glibc

/// Threads as the kernel names and reports them in `/proc`: how a test or a measurement
/// knows which thread is which, and that a thread it cannot see into has reached a wait.
public enum KernelThread {
    /// The calling thread's kernel thread id (`gettid`, which SwiftGlibc does not import),
    /// the name `/proc/self/task` lists it by; it differs from its `pthread_t`.
    public static func currentID() -> Int32 {
        Int32(self.stat("/proc/thread-self/stat")?.prefix { $0 != " " } ?? "") ?? -1
    }

    /// The state of thread `tid` of process `pid` (`R` running, `S` asleep), or `nil` once
    /// it is gone.
    public static func state(ofThread tid: Int32, inProcess pid: Int32 = getpid()) -> Character? {
        // The state follows the command name, which is in parentheses and may hold any byte.
        guard let stat = self.stat("/proc/\(pid)/task/\(tid)/stat"), let close = stat.lastIndex(of: ")") else {
            return nil
        }
        return stat[close...].dropFirst(2).first
    }

    /// Whether thread `tid` of this process is asleep.
    public static func isSleeping(_ tid: Int32) -> Bool {
        self.state(ofThread: tid) == "S"
    }

    /// What each thread of process `pid` is doing, as "tid state wait" entries in thread-id
    /// order: its state and the kernel function it sleeps in, such as `futex_do_wait` for a
    /// lock on this machine's kernel (`0` while it runs). Empty once the process is gone.
    public static func states(ofProcess pid: Int32) -> String {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        return tasks.compactMap { Int32($0) }.sorted().map { tid in
            let state = self.state(ofThread: tid, inProcess: pid).map(String.init) ?? "?"
            let wait = self.stat("/proc/\(pid)/task/\(tid)/wchan") ?? "?"
            return "\(tid) \(state) \(wait)"
        }.joined(separator: ", ")
    }

    /// A small `/proc` file's text without its trailing newline.
    private static func stat(_ path: String) -> String? {
        (try? String(contentsOfFile: path, encoding: .utf8))?.trimmingCharacters(in: .newlines)
    }
}
