import ArgumentParser
import Foundation

/// The `--hgrm` files, created before anything is measured: a path that cannot be written
/// must fail in a second, not after a run whose results it would then lose.
enum HistogramFiles {
    /// Creates `directory` if needed and opens, truncating, `<directory>/<name>.hgrm` for
    /// every name.
    ///
    /// - Throws: `ValidationError` naming `--hgrm`, the path and the system's reason.
    static func prepare(directory: String, names: [String]) throws {
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw ValidationError("--hgrm: cannot create directory '\(directory)'")
        }
        for name in names {
            let path = "\(directory)/\(name).hgrm"
            guard let file = fopen(path, "w") else {
                throw ValidationError("--hgrm: cannot write '\(path)': \(String(cString: strerror(errno)))")
            }
            fclose(file)
        }
    }
}
