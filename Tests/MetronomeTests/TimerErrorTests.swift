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
}
