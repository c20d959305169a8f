internal import CMeasurements
import Foundation

/// Kernel thread ids, the names `/proc/self/task` lists threads by.
public enum KernelThread {
    /// The calling thread's kernel thread id (`gettid`), which differs from its `pthread_t`.
    public static func currentID() -> Int32 {
        cmeasurements_gettid()
    }

    /// What each thread of process `pid` is doing, as "tid state wait" entries in thread-id
    /// order: its state (`R` running, `S` asleep) and the kernel function it sleeps in, such
    /// as `futex_do_wait` for a lock on this machine's kernel (`0` while it runs). Empty once
    /// the process is gone.
    public static func states(ofProcess pid: Int32) -> String {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        return tasks.compactMap { Int32($0) }.sorted().map { tid in
            let stat = SystemFile.read("/proc/\(pid)/task/\(tid)/stat") ?? ""
            // The state follows the command name, which is in parentheses and may hold any byte.
            let fields = stat.lastIndex(of: ")").map { stat[stat.index(after: $0)...] } ?? ""
            let state = fields.split(separator: " ").first.map(String.init) ?? "?"
            let wait = SystemFile.read("/proc/\(pid)/task/\(tid)/wchan") ?? "?"
            return "\(tid) \(state) \(wait)"
        }.joined(separator: ", ")
    }
}
