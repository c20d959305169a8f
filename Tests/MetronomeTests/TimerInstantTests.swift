@preconcurrency import Dispatch
import Metronome
import MetronomeTesting
import Synchronization
import Testing

/// `TimerInstant`'s arithmetic over the whole `Int64` range: a duration between two
/// instants is exact, an instant moved by a duration saturates, and neither traps.
struct TimerInstantTests {
    static let extremes: [Int64] = [.min, .min + 1, -1, 0, 1, .max - 1, .max]

    @Test func durationBetweenAnyTwoInstantsIsExact() {
        for from in Self.extremes {
            for to in Self.extremes {
                let duration = TimerInstant(nanoseconds: from).duration(to: TimerInstant(nanoseconds: to))
                #expect(duration == .nanoseconds(Int128(to) - Int128(from)), "from \(from) to \(to)")
            }
        }
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<10_000 {
            let (from, to) = (
                Int64.random(in: .min ... .max, using: &generator), Int64.random(in: .min ... .max, using: &generator)
            )
            let duration = TimerInstant(nanoseconds: from).duration(to: TimerInstant(nanoseconds: to))
            #expect(duration == .nanoseconds(Int128(to) - Int128(from)))
            // Moving back by it lands on the instant exactly, unless that saturates.
            let (_, overflow) = to.subtractingReportingOverflow(from)
            if !overflow { #expect(TimerInstant(nanoseconds: from).advanced(by: duration).nanoseconds == to) }
        }
    }

    /// A `Duration` in nanoseconds, as every schedule given one converts it: whole ones,
    /// toward zero, exact over `Duration`'s whole range, and `nil` past `Int64`.
    @Test func durationInNanosecondsIsExactAndTruncatesTowardZero() {
        // Computed the long way, from the seconds and the fraction.
        func expected(_ duration: Duration) -> Int128 {
            let (seconds, attoseconds) = duration.components
            return Int128(seconds) * 1_000_000_000 + Int128(attoseconds / 1_000_000_000)
        }
        let oneAttosecond = Duration(secondsComponent: 0, attosecondsComponent: 1)
        let cases: [(Duration, Int64?)] = [
            (.zero, 0), (oneAttosecond, 0), (.zero - oneAttosecond, 0),
            (.nanoseconds(1) - oneAttosecond, 0), (.nanoseconds(-1) + oneAttosecond, 0),
            (.nanoseconds(1) + oneAttosecond, 1), (.nanoseconds(-1) - oneAttosecond, -1),
            (.nanoseconds(Int64.max), .max), (.nanoseconds(Int64.max) + .nanoseconds(1), nil),
            (.nanoseconds(Int64.min), .min), (.nanoseconds(Int64.min) - .nanoseconds(1), nil),
            (.seconds(Int64.max), nil), (.seconds(Int64.min), nil),
            // Either side of where the attoseconds stop fitting in 64 bits (about 9.2 s).
            (Duration(attoseconds: Int128(Int64.max)), Int64.max / 1_000_000_000),
            (Duration(attoseconds: Int128(Int64.max) + 1), Int64.max / 1_000_000_000),
            (Duration(attoseconds: Int128(Int64.min)), Int64.min / 1_000_000_000),
            (Duration(attoseconds: Int128(Int64.min) - 1), Int64.min / 1_000_000_000),
        ]
        for (duration, nanoseconds) in cases {
            #expect(duration.wholeNanoseconds == expected(duration), "\(duration)")
            #expect(duration.representableNanoseconds == nanoseconds, "\(duration)")
        }
        var generator = SystemRandomNumberGenerator()
        let fraction: Int64 = 999_999_999_999_999_999
        for _ in 0..<10_000 {
            let duration = Duration(
                secondsComponent: Int64.random(in: .min ... .max, using: &generator),
                attosecondsComponent: Int64.random(in: -fraction...fraction, using: &generator))
            #expect(duration.wholeNanoseconds == expected(duration), "\(duration)")
            let small = Duration.nanoseconds(Int64.random(in: .min ... .max, using: &generator))
            #expect(small.wholeNanoseconds == expected(small), "\(small)")
        }
    }

    @Test func advancingSaturatesAtBothEnds() {
        #expect(TimerInstant(nanoseconds: .max).advanced(by: .nanoseconds(1)).nanoseconds == .max)
        #expect(TimerInstant(nanoseconds: .min).advanced(by: .nanoseconds(-1)).nanoseconds == .min)
        #expect(TimerInstant(nanoseconds: 0).advanced(by: .seconds(Int64.max)).nanoseconds == .max)
        #expect(TimerInstant(nanoseconds: 0).advanced(by: .seconds(Int64.min)).nanoseconds == .min)
        let span = TimerInstant(nanoseconds: .min).duration(to: TimerInstant(nanoseconds: .max))
        #expect(TimerInstant(nanoseconds: .min).advanced(by: span).nanoseconds == .max)
        #expect(TimerInstant(nanoseconds: .max).advanced(by: .zero - span).nanoseconds == .min)
    }

    /// A virtual timeline standing at either end of `Int64`, or just before 0: every clock's
    /// `DispatchTime` deadline converts, and a timer on it schedules and fires as due, and
    /// refuses a zero period, without trapping.
    @Test(arguments: [Int64.min, -1, .max])
    func timersOnATimelineAtTheEndsOfTime(start: Int64) {
        for clock in [TimerClock.monotonic, .boottime, .wall] {
            for deadline in [DispatchTime.now(), .distantFuture, DispatchTime(uptimeNanoseconds: 0)] {
                let timeline = ManualTimeline(startingAt: TimerInstant(nanoseconds: start))
                let timer = SafeDispatchTimer(backend: .custom(timeline), clock: clock)
                let fired = Atomic<Int>(0)
                let scheduled = timer.schedule(deadline: deadline) { _ in fired.add(1, ordering: .relaxed) }
                timeline.advance(by: .seconds(1))
                #expect(scheduled, "\(clock) at \(start)")
                // Every deadline converts to one at or after 0: none is due at the start of
                // time, and at its end every one is, "never" (`Int64.max`) included.
                let expected = start == .max ? 1 : 0
                if start != -1 { #expect(fired.load(ordering: .relaxed) == expected, "\(clock) at \(start)") }
                #expect(!timer.schedule(after: .seconds(1), every: .zero) { _ in })
            }
        }
    }

    @Test func latenessOfAnyTickIsExact() {
        let tick = Tick(
            scheduled: TimerInstant(nanoseconds: .max), fired: TimerInstant(nanoseconds: .min), missed: 0, sequence: 0)
        #expect(tick.lateness == .nanoseconds(Int128(Int64.min) - Int128(Int64.max)))
    }
}
