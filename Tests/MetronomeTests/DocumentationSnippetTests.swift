import Foundation
import Testing

/// The README and the DocC articles show only code that a test compiles: every ```swift
/// block of `README.md` and of `Sources/Metronome/Metronome.docc/*.md` must appear, line
/// for line, in a test source.
///
/// Lines are compared trimmed, and blank lines are left out, so a block keeps its meaning
/// when it is indented into a test function. The test sources are `ReadmeSnippetTests.swift`
/// and `ArticleSnippetTests.swift` beside this file, and every test of the Benchmarks
/// package (`Benchmarks/Tests`), which holds the blocks that need its dependencies:
/// swift-async-algorithms for `AsyncTimerSequence`, swift-log and swift-metrics for the
/// README's observability example (`MetronomeObservabilityTests`).
///
/// A fragment of a client's Package.swift is not code a test can hold; checking it would
/// take a client package resolving Metronome from its published address. Such a block is
/// marked in the Markdown, where whoever edits it sees the exemption: an HTML comment
/// starting `<!-- not compiled:` on the line before its fence, which neither GitHub nor
/// DocC renders.
@Suite
struct DocumentationSnippetTests {
    /// A ```swift block, with its lines trimmed and blank lines left out.
    struct Block {
        var file: String
        var line: Int
        var code: [String]
    }

    static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static let notCompiledMarker = "<!-- not compiled:"

    static func code(_ lines: some Sequence<Substring>) -> [String] {
        lines.map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    /// The ```swift blocks of a Markdown file, but for those marked as not compiled.
    static func blocks(in file: String) throws -> [Block] {
        let lines = try String(contentsOf: self.root.appending(path: file), encoding: .utf8)
            .split(separator: "\n", omittingEmptySubsequences: false)
        var blocks: [Block] = []
        var open: (language: Substring, line: Int, marked: Bool)?
        var previous = ""
        var body: [Substring] = []
        for (index, line) in lines.enumerated() {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if let fence = open {
                guard trimmed == "```" else {
                    body.append(line)
                    continue
                }
                if fence.language == "swift" && !fence.marked {
                    blocks.append(Block(file: file, line: fence.line, code: self.code(body)))
                }
                open = nil
            } else if trimmed.hasPrefix("```") {
                open = (trimmed.dropFirst(3), index + 1, previous.hasPrefix(self.notCompiledMarker))
                body = []
            }
            if !trimmed.isEmpty { previous = trimmed }
        }
        return blocks
    }

    static func swiftFiles(under directory: String) throws -> [String] {
        try FileManager.default.subpathsOfDirectory(atPath: self.root.appending(path: directory).path)
            .filter { $0.hasSuffix(".swift") }.sorted()
            .map { "\(directory)/\($0)" }
    }

    @Test
    func everySwiftBlockIsCompiledByATest() throws {
        let articles = try FileManager.default
            .contentsOfDirectory(atPath: Self.root.appending(path: "Sources/Metronome/Metronome.docc").path)
            .filter { $0.hasSuffix(".md") }.sorted()
            .map { "Sources/Metronome/Metronome.docc/\($0)" }
        let blocks = try (["README.md"] + articles).flatMap(Self.blocks(in:))
        let sources =
            ["Tests/MetronomeTests/ReadmeSnippetTests.swift", "Tests/MetronomeTests/ArticleSnippetTests.swift"]
            + (try Self.swiftFiles(under: "Benchmarks/Tests"))
        let tests = try sources.map {
            Self.code(try String(contentsOf: Self.root.appending(path: $0), encoding: .utf8).split(separator: "\n"))
        }
        #expect(!blocks.isEmpty, "no ```swift block found: is the root \(Self.root.path)?")
        for block in blocks {
            let home = block.file == "README.md" ? "ReadmeSnippetTests.swift" : "ArticleSnippetTests.swift"
            #expect(
                tests.contains { $0.firstRange(of: block.code) != nil },
                """
                \(block.file):\(block.line): the block starting `\(block.code.first ?? "")` is in no test. \
                Copy it unchanged into a test in Tests/MetronomeTests/\(home), or under Benchmarks/Tests \
                when it needs that package's dependencies; a block no test can hold gets \
                `\(Self.notCompiledMarker) why -->` on the line before its fence.
                """
            )
        }
    }
}
