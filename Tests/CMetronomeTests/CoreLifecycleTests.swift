#if Engine
// Lifecycle contracts of the C core: timer destroy (from another thread while its
// callback runs, from its own callback, stale ids) and engine destroy (timers armed,
// disarmed, mid-callback, from a callback). Every context is released exactly once.
import CMetronome
import Glibc
import Testing

extension CoreContractTests {
    @Suite(.serialized, .tags(.realTime))
    struct Lifecycle {
        // MARK: Timer destroy

        /// Destroyed from another thread while its callback blocks: destroy does not wait,
        /// and the context is released once, after the callback returned.
        @Test func destroyTimerWhileItsCallbackRuns() throws {
            let engine = try Engine()
            let gate = Gate()
            let probe = try engine.makeTimer { _ in gate.pass() }
            try #require(probe.armOnce(at: Time.monotonic() + 2 * Time.ms) == 0)
            try #require(engine.log.wait { $0.running == 1 })

            #expect(probe.destroy() == 0)
            // The callback waits for the gate this thread still holds: had destroy waited
            // for it, destroy would have returned only once the gate gave up.
            let stillInTheCallback = probe.inCallback.load(ordering: .acquiring)
            #expect(stillInTheCallback, "destroy waited for the callback")
            #expect(probe.releases.load(ordering: .acquiring) == 0, "released while its callback runs")
            #expect(engine.counters.timers == 0)
            expectStale(probe)

            gate.open()
            #expect(engine.log.wait { !$0.releases.isEmpty })
            let firing = try #require(engine.firings.first)
            let release = try #require(engine.log.read { $0.releases.first })
            #expect(release.atNs >= firing.endNs, "released before its callback returned")
            #expect(!engine.log.wait(timeoutNs: 20 * Time.ms) { $0.releases.count > 1 })
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// Destroyed from its own callback: released once, when the callback returns; no
        /// further tick.
        @Test func destroyTimerFromItsOwnCallback() throws {
            let engine = try Engine()
            let results = Monitor([(rc: Int32, releasesInside: Int)]())
            let probe = try engine.makeTimer { callback in
                guard callback.probe.fires.load(ordering: .relaxed) == 3 else { return }
                let rc = callback.probe.destroy()
                Time.sleep(2 * Time.ms)  // the release must still wait for the return
                results.update { $0.append((rc, callback.probe.releases.load(ordering: .acquiring))) }
            }
            try #require(probe.armRepeating(start: Time.monotonic() + Time.ms, period: Time.ms) == 0)
            #expect(engine.log.wait { !$0.releases.isEmpty })
            let result = try #require(results.read { $0.first })
            #expect(result.rc == 0)
            #expect(result.releasesInside == 0, "released while its callback still ran")
            #expect(!engine.log.wait(timeoutNs: 10 * Time.ms) { $0.firings.count > 3 }, "fired after destroy")
            let release = try #require(engine.log.read { $0.releases.first })
            #expect(release.atNs >= engine.firings[2].endNs)
            expectStale(probe)
            #expect(engine.counters.timers == 0 && engine.counters.armed == 0)
            engine.destroyAndExpectAllReleasedOnce()
        }

        /// A destroyed timer is released before destroy returns (no callback running), and
        /// its id is refused from then on, even once its slot is reused.
        @Test func staleIdIsRefusedAfterDestroy() throws {
            let engine = try Engine()
            let old = try engine.makeTimer()
            try #require(old.armOnce(at: Time.monotonic() + 1 * Time.s) == 0)
            #expect(old.destroy() == 0)
            #expect(old.releases.load(ordering: .acquiring) == 1, "not released before destroy returned")
            expectStale(old)
            #expect(engine.counters.armed == 0)

            // The slot is reused under a new generation; the stale id does not reach it.
            let new = try engine.makeTimer()
            #expect(UInt32(truncatingIfNeeded: new.id) == UInt32(truncatingIfNeeded: old.id))
            #expect(new.id != old.id)
            let deadline = Time.monotonic() + 5 * Time.ms
            try #require(new.armOnce(at: deadline) == 0)
            expectStale(old)
            #expect(engine.counters.armed == 1, "a stale id disarmed the slot's new timer")
            #expect(engine.waitFirings(1))
            #expect(engine.firings.map(\.probe) == [new.index])
            engine.destroyAndExpectAllReleasedOnce()
        }

        // MARK: Engine destroy

        /// Engine destroy releases every context exactly once: one-shots and repeating
        /// timers armed, timers never armed, cancelled, and already destroyed.
        @Test func engineDestroyReleasesArmedAndDisarmedTimers() throws {
            let engine = try Engine()
            let far = Time.monotonic() + 3_600 * Time.s
            for k in 0..<60 {
                let probe = try engine.makeTimer()
                let clock = mtr_clock_id.all[k % 3]
                let farOnClock = Time.now(clock) + 3_600 * Time.s
                switch k % 5 {
                case 0: try #require(probe.armOnce(clock, at: farOnClock + Int64(k)) == 0)
                case 1: try #require(probe.armRepeating(clock, start: farOnClock, period: Time.s) == 0)
                case 2: break  // never armed
                case 3:
                    try #require(probe.armOnce(at: far) == 0)
                    try #require(probe.cancel() == 0)
                default:
                    try #require(probe.armOnce(at: far) == 0)
                    try #require(probe.destroy() == 0)
                }
            }
            let counters = engine.counters
            #expect(counters.timers == 48)
            #expect(counters.armed == 24)
            engine.destroy()
            #expect(engine.log.read { $0.releases.count } == 60, "destroy returned before releasing")
            #expect(engine.firings.isEmpty)
            engine.expectAllReleasedOnce()
        }

        /// Engine destroy from another thread while a callback blocks: it waits for the
        /// callback, fires nothing more, and releases every context once, after the
        /// callback returned.
        @Test func engineDestroyWhileACallbackRuns() throws {
            let engine = try Engine()
            let started = Gate()
            let idle = try engine.makeTimer()
            let far = Time.monotonic() + 3_600 * Time.s
            let blocker = try engine.makeTimer { _ in
                started.open()
                // Returns only once destroy has begun, which refuses every arming from then
                // on, however late the destroying thread runs.
                let giveUp = Time.monotonic() + Bounds.patienceNs
                while idle.armOnce(at: far) != ESHUTDOWN, Time.monotonic() < giveUp { Time.sleep(100 * Time.us) }
            }
            let now = Time.monotonic()
            try #require(blocker.armOnce(at: now + 2 * Time.ms) == 0)
            // Due while the callback blocks: must not fire once destroy has begun.
            for k in 0..<10 {
                let probe = try engine.makeTimer()
                try #require(probe.armOnce(at: now + 4 * Time.ms + Int64(k) * Time.us) == 0)
            }
            #expect(started.pass())

            let destroyer = try PosixThread.spawn { engine.destroy() }
            destroyer.join()
            let returned = Time.monotonic()
            let firing = try #require(engine.firings.first)
            #expect(firing.endNs > 0 && firing.endNs <= returned, "destroy returned before the callback did")
            #expect(engine.firings.count == 1, "a timer fired after destroy began")
            #expect(engine.log.read { $0.releases.allSatisfy { $0.atNs >= firing.endNs } })
            engine.expectAllReleasedOnce()
        }

        /// Engine destroy from inside a callback returns without tearing down, which waits
        /// for the callback to return (were it to wait for itself, it would never return);
        /// the firing thread then tears down and releases every context once.
        @Test func engineDestroyFromInsideACallback() throws {
            let engine = try Engine()
            // What the callback saw when destroy returned: contexts released by then.
            let results = Monitor([Int]())
            let deadline = Time.monotonic() + 3 * Time.ms
            let destroyer = try engine.makeTimer { callback in
                mtr_engine_destroy(callback.engine.handle)
                results.update { $0.append(callback.probe.log.read { $0.releases.count }) }
                Time.sleep(5 * Time.ms)  // teardown must wait for this return
            }
            engine.markDestroyed()
            try #require(destroyer.armOnce(at: deadline) == 0)
            // Same deadline, armed later: same wake-up, after the destroyer in key order.
            for _ in 0..<5 {
                try #require(try engine.makeTimer().armOnce(at: deadline) == 0)
            }
            for k in 0..<5 {
                try #require(
                    try engine.makeTimer().armRepeating(start: deadline + 1 * Time.s, period: Time.ms + Int64(k)) == 0)
            }
            _ = try engine.makeTimer()  // never armed
            #expect(engine.waitAllReleased(), "teardown did not finish")
            #expect(results.read { $0 } == [0], "destroy from a callback tore down under it")
            let firings = engine.firings
            #expect(firings.map(\.probe) == [destroyer.index], "timers fired after the engine was destroyed")
            let end = try #require(firings.first?.endNs)
            #expect(
                engine.log.read { $0.releases.allSatisfy { $0.atNs >= end } }, "released before the callback returned")
            engine.expectAllReleasedOnce()
        }

        /// `mtr_engine_was_stopped` answers 0 until a stop and 1 from the stop's first release
        /// on, so that a release can tell the stop's from a destroy of its own timer's.
        @Test func wasStoppedTellsTheStopsReleasesFromADestroys() throws {
            let engine = try Engine()
            let seen = Monitor([Int: Int32]())
            let far = Time.monotonic() + 3_600 * Time.s
            let probes = try (0..<3).map { _ in try engine.makeTimer() }
            for probe in probes {
                probe.onRelease = { probe in
                    let stopped = mtr_engine_was_stopped(probe.engine.handle)
                    seen.update { $0[$0.count] = stopped }
                }
            }
            try #require(probes[1].armOnce(at: far) == 0)
            #expect(mtr_engine_was_stopped(engine.handle) == 0)
            try #require(probes[0].destroy() == 0)
            engine.stop()
            #expect(mtr_engine_was_stopped(engine.handle) == 1)
            #expect(seen.read { $0 } == [0: 0, 1: 1, 2: 1], "by release order: the destroy's, then the stop's two")
            engine.expectAllReleasedOnce()
        }

        /// Once destroy has begun, mtr_timer_create answers ESHUTDOWN; timers created
        /// before that are released by the teardown like the others.
        @Test func timerCreateDuringTeardownIsRefused() throws {
            let engine = try Engine()
            let started = Gate()
            let outcome = Monitor([String]())
            let creator = try engine.makeTimer { [unowned engine] _ in
                started.open()
                let giveUp = Time.monotonic() + Bounds.patienceNs
                // No event tells a callback that destroy began: poll create until refused.
                // The timers created meanwhile stay alive for the teardown to release.
                while Time.monotonic() < giveUp {
                    do {
                        try engine.makeTimer()
                    } catch let error as CoreError where error.code == ESHUTDOWN {
                        outcome.update { $0.append("ESHUTDOWN") }
                        return
                    } catch {
                        outcome.update { $0.append("\(error)") }
                        return
                    }
                    Time.sleep(100 * Time.us)
                }
                outcome.update { $0.append("never refused") }
            }
            try #require(creator.armOnce(at: Time.monotonic() + Time.ms) == 0)
            #expect(started.pass())
            let destroyer = try PosixThread.spawn { engine.destroy() }
            destroyer.join()
            #expect(outcome.read { $0 } == ["ESHUTDOWN"])
            engine.expectAllReleasedOnce()
        }
    }
}

/// Every call naming a destroyed timer is refused with EINVAL.
func expectStale(_ probe: Probe, sourceLocation: SourceLocation = #_sourceLocation) {
    let far = Time.monotonic() + 3_600 * Time.s
    #expect(probe.armOnce(at: far) == EINVAL, sourceLocation: sourceLocation)
    #expect(probe.armRepeating(start: far, period: Time.ms) == EINVAL, sourceLocation: sourceLocation)
    #expect(probe.cancel() == EINVAL, sourceLocation: sourceLocation)
    #expect(probe.cancelSync() == EINVAL, sourceLocation: sourceLocation)
    #expect(probe.destroy() == EINVAL, sourceLocation: sourceLocation)
}
#endif
