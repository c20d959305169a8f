import Testing

@testable import Metronome

/// An armed timer's memory is most of what a server with many timeouts holds: the core's
/// state packs into 72 bytes, one malloc size class below the next.
@Suite struct TimerMemoryTests {
    @Test func theStateOfATimerPacksIntoSeventyTwoBytes() {
        #expect(MemoryLayout<TimerState>.size == 72)
    }

    @Test func theMachineKeepsItsFlagsInOneByteAfterItsSchedule() {
        #expect(MemoryLayout<TimerStateMachine>.size == 33)
    }
}
