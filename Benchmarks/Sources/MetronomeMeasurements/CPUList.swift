import Foundation

/// A list of CPU numbers in the kernel's list syntax, `0,2-3`: what cyclictest's `-a` takes
/// and what `/proc/self/status` prints as `Cpus_allowed_list`.
///
/// Order is kept as written, because measuring thread `i` goes to the `i`-th CPU.
public struct CPUList: Sendable, Equatable, CustomStringConvertible {
    /// The CPUs, in the order given.
    public var cpus: [Int]

    /// The most CPUs a list may expand to, so `0-9999999999` cannot allocate a huge array;
    /// a `cpu_set_t` holds 1024.
    public static let limit = 1024

    /// Creates a list of `cpus`.
    public init(_ cpus: [Int]) {
        self.cpus = cpus
    }

    /// Parses `0,2-3`: numbers and ascending ranges, comma-separated; `nil` for anything else
    /// or for a CPU at or past ``limit``.
    public init?(_ text: String) {
        var cpus: [Int] = []
        for item in text.split(separator: ",", omittingEmptySubsequences: false) {
            let bounds = item.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false).map { Int($0) }
            guard let first = bounds.first ?? nil, let last = bounds.last ?? nil, 0 <= first, first <= last,
                last < Self.limit
            else { return nil }
            cpus += first...last
        }
        self.cpus = cpus
    }

    /// The shortest text that parses back to the same list.
    public var description: String {
        var items: [String] = []
        var index = self.cpus.startIndex
        while index < self.cpus.endIndex {
            var end = index
            while end + 1 < self.cpus.endIndex, self.cpus[end + 1] == self.cpus[end] + 1 { end += 1 }
            items.append(end == index ? "\(self.cpus[index])" : "\(self.cpus[index])-\(self.cpus[end])")
            index = end + 1
        }
        return items.joined(separator: ",")
    }

    /// The CPUs this process may run on, ascending: online and in its cpuset, so a thread
    /// pinned to any of them is accepted. `nil` if `/proc/self/status` cannot be read.
    public static var allowed: CPUList? {
        let field = "Cpus_allowed_list:"
        let line = SystemFile.read("/proc/self/status")?.split(separator: "\n").first { $0.hasPrefix(field) }
        return line.flatMap { CPUList(String($0.dropFirst(field.count)).trimmingCharacters(in: .whitespaces)) }
    }
}
