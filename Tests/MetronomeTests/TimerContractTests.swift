import Foundation
import Metronome
import MetronomeTesting
import Testing

/// The contract table itself: complete, true to its own promises, and the table the
/// documentation shows. The behaviour and property suites check the timer against it.
@Suite
struct TimerContractTests {
    @Test func oneRowPerStateAndOperationInTableOrder() {
        let keys = TimerContract.rows.map { "\($0.state) \($0.operation)" }
        let expected = TimerContract.states.flatMap { state in
            TimerContract.Operation.allCases.map { "\(state) \($0)" }
        }
        #expect(keys == expected)
    }

    /// "A refused call changes nothing", and a firing that runs no handler changes nothing.
    @Test func refusedOperationsKeepTheState() {
        let changing = TimerContract.rows.filter { !$0.outcome.accepted && $0.outcome.state != $0.state }
        #expect(changing.isEmpty, "\(changing)")
    }

    @Test func stateMachineArticleShowsTheTable() throws {
        let article = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Sources/Metronome/Metronome.docc/StateMachine.md")
        let text = try String(contentsOf: article, encoding: .utf8)
        // The table lines of the "Transition table" section, up to the next heading.
        let section = try #require(text.components(separatedBy: "\n## Transition table\n").dropFirst().first)
        let table = section.components(separatedBy: "\n").prefix { !$0.hasPrefix("#") }.filter { $0.hasPrefix("|") }
        #expect(table.joined(separator: "\n") == TimerContract.markdownTable)
    }
}
