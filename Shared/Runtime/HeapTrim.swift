import CMalloc
import Model
import Synchronization

/// When to hand the heap's free pages back to the system. glibc keeps what
/// a service freed (a batch's loaded rows, a burst of messages) for reuse,
/// so resident memory would stay at its busiest moment's peak (measured: a
/// gateway at 51 MB after a burst, 42 MB once trimmed). Under load those
/// pages are about to be used again, and handing them back costs a page
/// fault each (measured: trimming every 10 s under load cut a constellation's
/// throughput), so a trim waits for a tick in which the service took nothing,
/// comes once after each stretch of work, and at most once an interval.
struct HeapTrimSchedule {
    let intervalMs: Int64
    /// The count at the previous tick: the same count now is an idle tick.
    private var lastProcessed: Int64?
    /// When the last trim ran, and the count then: work since shows as a higher count.
    private var trimmed: (ms: Int64, processed: Int64)?

    init(intervalMs: Int64) { self.intervalMs = intervalMs }

    /// True when a trim is due at `nowMs`, the service having taken
    /// `processed` messages in all; it then counts as done.
    mutating func due(nowMs: Int64, processed: Int64) -> Bool {
        defer { lastProcessed = processed }
        guard processed == lastProcessed, processed != trimmed?.processed else { return false }
        if let trimmed, nowMs - trimmed.ms < intervalMs, nowMs >= trimmed.ms { return false }
        trimmed = (nowMs, processed)
        return true
    }
}

public enum Heap {
    /// Returns the free pages of every malloc arena to the system.
    public static func trim() { _ = malloc_trim(0) }

    /// At most two malloc arenas, unless `MALLOC_ARENA_MAX` says otherwise.
    /// glibc gives a thread that finds the heap busy an arena of its own, up
    /// to eight a core, and each arena keeps its own free pages: the filter
    /// with 100,000 devices was at 59 MB resident with the default and 50–51
    /// with two. A service works on one thread at a time, so two cost no
    /// throughput (measured the same at 10,000 devices).
    public static func limitArenas(environment: [String: String]) {
        guard environment["MALLOC_ARENA_MAX"] == nil else { return }
        _ = mallopt(M_ARENA_MAX, 2)
    }
}

/// A process's heap trims: `trimIfDue` on every tick of its network thread.
final class HeapTrims: Sendable {
    private let schedule = Mutex(HeapTrimSchedule(intervalMs: 10_000))
    private let counters: HealthCounters
    private let clock: any WallClock

    init(counters: HealthCounters, clock: any WallClock) { self.counters = counters; self.clock = clock }

    func trimIfDue() {
        let processed = counters.processedCount
        if schedule.withLock({ $0.due(nowMs: clock.nowMs(), processed: processed) }) { Heap.trim() }
    }
}
