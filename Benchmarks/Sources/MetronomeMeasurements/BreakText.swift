import Foundation

/// The sentence a report carries when `--breaktrace` stopped a run: which backend, how late,
/// and when, as a UTC time and on `CLOCK_MONOTONIC` so it can be matched with a kernel trace.
enum BreakText {
    static func describe(_ firstBreak: LatencyRecorder.Break, backend: String, round: Int) -> String {
        let agoNanoseconds = MonotonicTime.now() - firstBreak.firedNanoseconds
        let wall = Date().addingTimeInterval(-Double(agoNanoseconds) / 1e9)
        let lateness = NumberText.microseconds(Double(firstBreak.latenessNanoseconds) / 1_000)
        return
            "breaktrace: \(backend) fired \(lateness) µs late at \(Date.ISO8601FormatStyle(includingFractionalSeconds: true).format(wall)) "
            + "(CLOCK_MONOTONIC \(firstBreak.firedNanoseconds) ns), sample \(firstBreak.sample) of round \(round); run stopped"
    }
}

extension String {
    /// `nil` for the empty string.
    var nilIfEmpty: String? { self.isEmpty ? nil : self }
}
