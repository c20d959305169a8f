import Foundation
import MetronomeTestSupport
import Testing

/// `metronome jitter` as a reader sees it: every column of both tables defined in a note,
/// and each backend's spread across rounds agreeing with the rounds its JSON report carries.
@Suite(.serialized)
struct JitterTableTests {
    /// What one text run printed: each table's header cells and rows, and the notes.
    struct Printed {
        var tables: [(header: [String], rows: [[String]])] = []
        var notes: [String] = []
    }

    /// Runs `metronome jitter` with `arguments` and splits what it printed.
    func printed(_ arguments: [String]) throws -> Printed {
        let executable = try ChildProcess.product("metronome").get()
        let run = try ChildProcess.run(executable, ["jitter"] + arguments, timeout: 240)
        #expect(run.status == 0, "stderr: \(run.stderr.suffix(2000))")
        var printed = Printed()
        // Tables are blocks of lines after the settings, each followed by a blank line; cells
        // are separated by two spaces or more.
        let blocks = run.stdout.components(separatedBy: "\n\n").dropFirst()
        for block in blocks {
            let lines = block.split(separator: "\n").map(String.init)
            let table = lines.filter { !$0.hasPrefix("note: ") }
            if let header = table.first {
                let cells = { (line: String) in
                    line.components(separatedBy: "  ").map { $0.trimmingCharacters(in: .whitespaces) }
                        .filter { !$0.isEmpty }
                }
                printed.tables.append((cells(header), table.dropFirst().map(cells)))
            }
            printed.notes += lines.filter { $0.hasPrefix("note: ") }.map { String($0.dropFirst(6)) }
        }
        return printed
    }

    /// The columns the notes define: what comes before ` = `, split at `, `.
    static func defined(by notes: [String]) -> Set<String> {
        Set(
            notes.compactMap { note in note.range(of: " = ").map { String(note[..<$0.lowerBound]) } }
                .flatMap { $0.components(separatedBy: ", ") })
    }

    @Test(.timeLimit(.minutes(5)), arguments: [[String](), ["--nsecs"]])
    func everyColumnOfBothTablesIsDefinedInTheNotes(unit: [String]) throws {
        let printed = try self.printed(
            ["--samples", "60", "--rounds", "3", "--backends", "timerfd,gcd", "--interval", "200"] + unit)
        try #require(printed.tables.count == 2, "the results table and the rounds table")
        let defined = Self.defined(by: printed.notes)
        for (header, _) in printed.tables {
            for column in header where column != "backend" {
                #expect(defined.contains(column), "column '\(column)' is not defined in the notes")
            }
        }
    }

    /// The rounds table shows each backend's lowest and highest p99 of its rounds, and its
    /// place in each round, as the JSON report's `rounds` give them.
    @Test(.timeLimit(.minutes(5)))
    func theRoundsTableShowsEachBackendsSpreadAndPlaces() throws {
        let printed = try self.printed(
            ["--samples", "60", "--rounds", "3", "--backends", "timerfd,gcd", "--interval", "200"])
        try #require(printed.tables.count == 2)
        let (header, rows) = printed.tables[1]
        #expect(header == ["backend", "rounds", "p50 µs range", "p99 µs range", "p99 place by round"])
        #expect(rows.map(\.first) == ["timerfd", "gcd"])
        for row in rows {
            try #require(row.count == header.count)
            #expect(row[1] == "3")
            #expect(row[2].contains("–") && row[3].contains("–"), "\(row)")
            let places = row[4].split(separator: " ").compactMap { Int($0) }
            #expect(places.count == 3 && places.allSatisfy { (1...2).contains($0) }, "\(row)")
        }
        // In each round one backend is first: a place shared only by a tie.
        let placesByRound = rows.map { $0[4].split(separator: " ").compactMap { Int($0) } }
        for round in 0..<3 { #expect(placesByRound.contains { $0[round] == 1 }) }
        #expect(printed.notes.contains { $0.hasPrefix("the backends kept the table's p99 order in ") })
    }

    /// One round makes no rounds table, and its columns are then not defined either.
    @Test(.timeLimit(.minutes(5)))
    func oneRoundPrintsOneTable() throws {
        let printed = try self.printed(["--samples", "40", "--rounds", "1", "--backends", "timerfd"])
        #expect(printed.tables.count == 1)
        #expect(!Self.defined(by: printed.notes).contains("p99 place by round"))
    }
}
