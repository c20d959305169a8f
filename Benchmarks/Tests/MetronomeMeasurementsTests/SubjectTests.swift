@preconcurrency import Dispatch
import Foundation
import Testing

@testable import MetronomeMeasurements

extension RealTime {
    @Suite struct SubjectTests {
        private let config = JitterConfiguration(intervalNanoseconds: 1_000_000, samples: 200, timers: 1, warmup: 10)

        /// 300 one-shots over 200 ms with 20 ms leeway.
        private static func coalesceConfig(seed: UInt64) -> CoalesceConfiguration {
            CoalesceConfiguration(
                timers: 300, windowNanoseconds: 200_000_000, leewayNanoseconds: 20_000_000, seed: seed)
        }

        @Test(.timeLimit(.minutes(1)))
        func dispatchTimeReadsTheMonotonicClock() {
            let before = MonotonicTime.now()
            let dispatch = Int64(DispatchTime.now().uptimeNanoseconds)
            let after = MonotonicTime.now()
            #expect((before...after).contains(dispatch))
        }

        /// The timerfd loop counts its wake-ups (a read each, warm-up included); GCD cannot.
        @Test(
            .timeLimit(.minutes(1)),
            arguments: [(TimerfdLoopSubject() as any JitterSubject, true), (DispatchSubject(), false)])
        func deliversEverySampleNeverEarly(subject: any JitterSubject, countsWakeups: Bool) throws {
            let recorder = LatencyRecorder(target: config.samples, discardFirst: config.warmup)
            let counters = try subject.run(config, recorder: recorder)
            let summary = recorder.summary
            #expect(summary.samples == 200)
            #expect(summary.early == 0)
            #expect(summary.p50Nanoseconds < 50_000_000)
            #expect(counters.wakeups.map { $0 >= 210 } ?? false == countsWakeups)
        }

        /// NIO's wake-ups are its loop thread's blocks: a late loop runs a due task without
        /// blocking, so only their presence is certain, not one per firing.
        @Test(.timeLimit(.minutes(1)))
        func eventLoopDeliversEverySampleNeverEarlyAndCountsItsLoopsWakeups() throws {
            let recorder = LatencyRecorder(target: config.samples, discardFirst: config.warmup)
            let counters = try EventLoopSubject().run(config, recorder: recorder)
            #expect(recorder.summary.samples == 200)
            #expect(recorder.summary.early == 0)
            #expect(recorder.firings >= 210)
            #expect((counters.wakeups ?? 0) > 0)
            #expect(counters.note?.contains("no leeway") == true)
        }

        @Test func eventLoopRefusesAClockItCannotScheduleOn() {
            var config = self.config
            config.clock = .boottime
            #expect(throws: MeasurementError.invalidConfiguration("nio schedules on CLOCK_MONOTONIC only")) {
                try EventLoopSubject().run(config, recorder: LatencyRecorder(target: 1))
            }
        }

        @Test(
            .timeLimit(.minutes(1)),
            arguments: [TimerfdLoopSubject() as any JitterSubject, DispatchSubject(), EventLoopSubject()])
        func severalTimersWithHandlerWork(subject: any JitterSubject) throws {
            var config = self.config
            config.timers = 3
            config.samples = 300
            config.handlerWorkNanoseconds = 20_000
            let recorder = LatencyRecorder(target: config.samples, discardFirst: config.warmup)
            _ = try subject.run(config, recorder: recorder)
            #expect(recorder.summary.samples == 300)
            #expect(recorder.summary.early == 0)
            #expect(recorder.firings >= 310)
        }

        @Test(.timeLimit(.minutes(1)))
        func measuringThreadsMergeTheirSamplesAndKeepEachWorstCaseOverRounds() throws {
            let cpu = try #require(CPUList.allowed?.cpus.first)
            let subject = JitterThreads(name: "timerfd", cpus: [cpu, nil]) { TimerfdLoopSubject(cpu: $0) }
            let result = try #require(try JitterRunner.run(subjects: [subject], config: config, rounds: 2).first)
            let threads = try #require(result.threads)
            #expect(threads.map(\.thread) == [0, 1])
            #expect(threads.map(\.cpu) == [cpu, nil])
            // Each thread records the full sample count, as each cyclictest thread runs every loop.
            #expect(threads.map(\.samples) == [200, 200])
            #expect(result.samples == 400)
            #expect(result.early == 0)
            #expect(result.maxMicroseconds == threads.map(\.maxMicroseconds).max())
        }

        @Test(.timeLimit(.minutes(1)))
        func dispatchFiresOneShotsWithinTheirWindows() throws {
            let config = Self.coalesceConfig(seed: 3)
            let recorder = CoalesceRecorder(timers: config.timers, leewayNanoseconds: config.leewayNanoseconds)
            _ = try DispatchSubject().run(config, deadlines: config.deadlines(), recorder: recorder)
            #expect(recorder.summary.samples == 300)
            #expect(recorder.early == 0)
            #expect(recorder.inWindow + recorder.late == 300)
        }

        @Test(.timeLimit(.minutes(1)))
        func eventLoopFiresEveryOneShotNeverEarlyAndCountsItsLoopsWakeups() throws {
            let config = Self.coalesceConfig(seed: 3)
            let recorder = CoalesceRecorder(timers: config.timers, leewayNanoseconds: config.leewayNanoseconds)
            let counters = try EventLoopSubject().run(config, deadlines: config.deadlines(), recorder: recorder)
            #expect(recorder.summary.samples == 300)
            #expect(recorder.early == 0)
            #expect(recorder.inWindow + recorder.late == 300)
            #expect((counters.wakeups ?? 0) > 0)
            #expect(counters.note?.contains("no leeway") == true)
        }

        @Test(.timeLimit(.minutes(1)))
        func jitterRunnerMeasuresEachSubjectInOrder() throws {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("hgrm-\(UUID())").path
            defer { try? FileManager.default.removeItem(atPath: directory) }
            var lines: [String] = []
            let results = try JitterRunner.run(
                subjects: [TimerfdLoopSubject(), DispatchSubject()],
                config: config,
                load: 1,
                hgrmDirectory: directory,
                progress: { lines.append($0) }
            )
            #expect(results.map(\.backend) == ["timerfd", "gcd"])
            #expect(lines.count == 4)
            for result in results {
                #expect(result.samples == 200)
                #expect(result.early == 0)
                #expect(result.wakeupsPerSecond > 0)
                #expect(result.cpuMillisecondsPer1k > 0)
                #expect(FileManager.default.fileExists(atPath: "\(directory)/\(result.backend).hgrm"))
            }
            #expect(results[0].note == nil)
            #expect(results[1].note?.contains("ru_nvcsw") == true)
            let notes = JitterRunner.notes(config: config, load: 1, results: results)
            #expect(notes[0] == "backends ran one after another with the same settings: timerfd, gcd")
            #expect(notes.contains { $0.hasPrefix("1 busy thread(s)") })
            #expect(notes.contains(results[1].note!))
        }

        @Test(.timeLimit(.minutes(1)))
        func jitterRunnerInterleavesRoundsInRotatedOrder() throws {
            var lines: [String] = []
            let results = try JitterRunner.run(
                subjects: [TimerfdLoopSubject(), DispatchSubject()],
                config: config,
                rounds: 3,
                progress: { lines.append($0) }
            )
            // Every round's share adds up to the requested samples, per subject.
            #expect(results.map(\.samples) == [200, 200])
            #expect(results.allSatisfy { $0.early == 0 })
            // One line per run (3 rounds × 2 subjects), then one per subject; each round
            // starts with the next subject.
            #expect(lines.count == 8)
            let starts = lines.filter { $0.hasPrefix("round ") }.map {
                $0.split(separator: ",")[1].split(separator: ":")[0]
            }
            #expect(starts == [" timerfd", " gcd", " gcd", " timerfd", " timerfd", " gcd"])
            let notes = JitterRunner.notes(config: config, load: 0, rounds: 3, results: results)
            #expect(notes[0].hasPrefix("backends ran interleaved with the same settings: 3 rounds"))
            #expect(throws: MeasurementError.self) {
                try JitterRunner.run(subjects: [DispatchSubject()], config: config, rounds: 0)
            }
        }

        @Test(.timeLimit(.minutes(1)))
        func coalesceRunnerComparesWithTheOptimum() throws {
            let config = Self.coalesceConfig(seed: 5)
            let results = try CoalesceRunner.run(subjects: [DispatchSubject()], config: config)
            let result = try #require(results.first)
            #expect(result.latency.samples == 300)
            #expect(result.latency.early == 0)
            #expect(result.inWindow + result.late == 300)
            #expect(result.optimumWakeups == config.optimumWakeups(for: config.deadlines()))
            #expect(result.optimumWakeups >= 1 && result.optimumWakeups <= 11)
            #expect(result.wakeups > 0)
            #expect(CoalesceRunner.notes(config: config, load: 0, results: results).count == 3)
        }

        @Test(
            .timeLimit(.minutes(1)),
            arguments: [TimerfdLoopSubject() as any JitterSubject, DispatchSubject(), EventLoopSubject()])
        func timingOutTearsDownAndThrows(subject: any JitterSubject) throws {
            // Discarding every firing keeps the recorder incomplete until the subject gives up.
            let recorder = LatencyRecorder(target: 1, discardFirst: .max)
            var config = self.config
            config.samples = 1
            config.warmup = 0
            #expect(throws: MeasurementError.timedOut(backend: subject.name, recorded: 0, expected: 1)) {
                try subject.run(config, recorder: recorder)
            }
            let firings = recorder.firings
            #expect(firings > 0)
            // Torn down: nothing fires any more.
            MonotonicTime.spin(nanoseconds: 20_000_000)
            #expect(recorder.firings == firings)
        }
    }
}
