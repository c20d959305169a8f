import Glibc
import Metronome
import Testing

/// An error compares by its `errno`: a thrown error equals the constant for its code, and
/// errors that differ only in where they came from are one error.
@Suite struct TimerErrorTests {
    @Test func aThrownErrorEqualsTheConstantForItsCode() {
        let refused = #expect(throws: TimerError.self) {
            try TimerEngine(configuration: .init(realtimePriority: 0))
        }
        #expect(refused == .invalidArgument)
        #expect(refused != .engineShutDown)
        #expect(refused?.setting == "realtimePriority")
    }

    @Test func whereAnErrorCameFromIsNotWhichErrorItIs() {
        let stopped = TimerError(code: ESHUTDOWN, operation: "mtr_timer_create")
        let stopping = TimerError(code: ESHUTDOWN, operation: "mtr_engine_stop", setting: "any", reason: "any")
        #expect(stopped == .engineShutDown && stopping == .engineShutDown && stopped == stopping)
        #expect(Set([stopped, stopping, .engineShutDown, .tooManyOpenFiles]).count == 2)
        #expect(stopped.hashValue == TimerError.engineShutDown.hashValue)
        #expect(TimerError(code: EMFILE, operation: "mtr_engine_create") != .engineShutDown)
    }

    @Test func patternMatchingAgreesWithEquality() {
        let error: any Error = TimerError(code: EMFILE, operation: "mtr_engine_create")
        switch error {
        case TimerError.engineShutDown: Issue.record("EMFILE matched ESHUTDOWN")
        case TimerError.tooManyOpenFiles: break
        default: Issue.record("EMFILE did not match its constant")
        }
    }

    /// Printed, an error says what happened in the library's words; the C function and
    /// `errno` are properties, and in `debugDescription`.
    @Test func anErrorReadsAsWhatHappened() async throws {
        #expect("\(TimerError.engineShutDown)" == "the timer's engine was shut down")

        let engine = try TimerEngine()
        await engine.shutdown()
        let clock = EngineClock(backend: .engine(engine))
        let stopped = await #expect(throws: TimerError.self) { try await clock.sleep(for: .seconds(1)) }
        #expect(stopped.map { "\($0)" } == "the timer's engine was shut down")
        #expect(stopped?.code == ESHUTDOWN)
        #expect(stopped?.debugDescription.hasPrefix("the timer's engine was shut down (") == true)
        #expect(stopped?.debugDescription.hasSuffix("errno \(ESHUTDOWN))") == true)

        let refused = #expect(throws: TimerError.self) { try TimerEngine(configuration: .init(realtimePriority: 0)) }
        #expect(refused.map { "\($0)" } == "realtimePriority must be nil or in 1...99, not 0")
        #expect(refused?.operation == "mtr_engine_create")

        let wall = EngineClock(clock: .wall)
        let mismatched = await #expect(throws: TimerError.self) {
            try await EngineClock().sleep(until: wall.now + .seconds(1))
        }
        #expect(mismatched.map { "\($0)" } == "deadline is on the wall clock; it must be on the monotonic clock")

        for error in [stopped, refused, mismatched, .tooManyOpenFiles] {
            #expect(error.map { "\($0)".contains("errno") } == false)
        }
    }
}
