import CMalloc

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
    private var lastMs: Int64?
    private var lastProcessed: Int64?
    private var workedSinceTrim = true

    init(intervalMs: Int64) { self.intervalMs = intervalMs }

    /// True when a trim is due at `nowMs`, the service having taken
    /// `processed` messages in all; it then counts as done.
    mutating func due(nowMs: Int64, processed: Int64) -> Bool {
        let idle = processed == lastProcessed
        if !idle, lastProcessed != nil { workedSinceTrim = true }
        lastProcessed = processed
        guard idle, workedSinceTrim else { return false }
        if let lastMs, nowMs - lastMs < intervalMs, nowMs >= lastMs { return false }
        lastMs = nowMs
        workedSinceTrim = false
        return true
    }
}

enum Heap {
    /// Returns the free pages of every malloc arena to the system.
    static func trim() { _ = malloc_trim(0) }
}
