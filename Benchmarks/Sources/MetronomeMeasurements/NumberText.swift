import Foundation

/// Number formatting shared by tables and progress lines.
public enum NumberText {
    /// Microseconds with 2 decimals below 100 µs and 1 above, so columns stay narrow while
    /// small values keep their resolution.
    public static func microseconds(_ value: Double) -> String {
        String(format: value < 100 ? "%.2f" : "%.1f", value)
    }

    /// `value` with exactly `places` decimals.
    public static func fixed(_ value: Double, places: Int) -> String {
        String(format: "%.\(places)f", value)
    }
}
