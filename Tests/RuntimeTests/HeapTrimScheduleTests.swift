@testable import Runtime
import Testing

/// The heap is trimmed once a stretch of work is over (a tick that took no
/// message), once per stretch, and at most once an interval.
@Suite struct HeapTrimScheduleTests {
    /// Each tick's (time, messages taken in all), and whether it trimmed.
    func trims(_ ticks: [(nowMs: Int64, processed: Int64)], intervalMs: Int64 = 10_000) -> [Bool] {
        var schedule = HeapTrimSchedule(intervalMs: intervalMs)
        return ticks.map { schedule.due(nowMs: $0.nowMs, processed: $0.processed) }
    }

    @Test func aTrimWaitsForAnIdleTickAfterWork() {
        // The first tick only notes the count; busy, busy; idle after work: trim;
        // still idle with nothing new freed: none, however long.
        #expect(trims([(0, 0), (1_000, 500), (2_000, 900), (3_000, 900), (4_000, 900), (60_000, 900)])
                == [false, false, false, true, false, false])
    }

    @Test func atMostOnceAnInterval() {
        // Idle after work at 4 s, but within the interval of the trim at 2 s: it waits until 12 s.
        #expect(trims([(0, 0), (1_000, 10), (2_000, 10), (3_000, 20), (4_000, 20), (12_000, 20)])
                == [false, false, true, false, false, true])
    }

    @Test func aClockThatStepsBackDoesNotHoldTrimsOff() {
        #expect(trims([(50_000, 0), (51_000, 10), (52_000, 10), (40_000, 20), (41_000, 20)])
                == [false, false, true, false, true])
    }
}
