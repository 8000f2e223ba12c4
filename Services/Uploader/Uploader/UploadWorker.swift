import Bus
import Foundation
import TrackerLog
import Model
import Runtime
import Store
import Synchronization
import UploaderCore

/// What `syncNow` answers.
enum SyncOutcome: Equatable, Encodable {
    case uploaded(Int), empty, retry(String), authExpired, notConfigured

    func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        switch self {
        case .uploaded(let n): try c.encode(["outcome": .string("uploaded"), "count": JSONValue.number(Double(n))] as [String: JSONValue])
        case .empty: try c.encode(["outcome": "empty"])
        case .retry(let reason): try c.encode(["outcome": "retry", "reason": reason])
        case .authExpired: try c.encode(["outcome": "authExpired"])
        case .notConfigured: try c.encode(["outcome": "notConfigured"])
        }
    }
}

/// The upload loop, on its own thread and store connection: the oldest
/// waiting batch goes out, and its verdict decides (delete, retry later,
/// stop for new credentials, or park it so the rest flows). The host keeps
/// enqueueing meanwhile; nothing here blocks a message.
final class UploadWorker: @unchecked Sendable {
    // @unchecked: `store` and the loop's own fields are touched on the loop's thread only; the rest is in `state`.
    private let path: String
    private let transport: any HTTPTransport
    private let clock: any WallClock
    private let random: @Sendable () -> Double
    private let logger: Logger
    private let topics: Topics
    private var store: UploaderStore?
    private var bus: (any MessageBus)?
    private var counters: HealthCounters?
    private let wakeUp = DispatchSemaphore(value: 0)
    private let finished = DispatchSemaphore(value: 0)

    private struct State {
        var stopping = false
        var forced = false
        var waiters: [CheckedContinuationBox] = []
        var waiting = 0
        /// Points committed to the queue since start, to keep `waiting` true between passes.
        var noted = 0
        /// A wake-up for new points is signalled and its pass has not started:
        /// more points need no more signals (one per point queued a pass per point).
        var woken = false
    }
    private let state = Mutex(State())

    /// Retry bookkeeping (loop thread only).
    private var attempt = 0
    private var nextAttemptMs: Int64 = 0

    init(path: String, topics: Topics, transport: any HTTPTransport, clock: any WallClock, logger: Logger,
         random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) }) {
        self.path = path; self.topics = topics; self.transport = transport; self.clock = clock; self.logger = logger; self.random = random
    }

    func start(bus: any MessageBus, counters: HealthCounters) {
        self.bus = bus
        self.counters = counters
        counters.queueDepth { [weak self] in Int64(self?.state.withLock { $0.waiting } ?? 0) }
        let thread = Thread { [self] in run() }
        thread.name = "uploader"
        thread.start()
    }

    func stop() {
        state.withLock { $0.stopping = true }
        wakeUp.signal()
        _ = finished.wait(timeout: .now() + 10)
    }

    /// New points or a new config: look again now.
    func wake() { wakeUp.signal() }

    /// A point was committed to the queue: health counts it at once, a pass sends it.
    func noteQueued() {
        let signal = state.withLock { s -> Bool in
            s.noted += 1
            s.waiting += 1
            defer { s.woken = true }
            return !s.woken
        }
        if signal { wakeUp.signal() }
    }

    /// `syncNow`: an attempt now, whatever autoSync and the backoff say;
    /// requests that arrive meanwhile share its outcome.
    func syncNow(timeout: Duration) -> SyncOutcome? {
        let box = CheckedContinuationBox()
        state.withLock { $0.forced = true; $0.waiters.append(box) }
        wakeUp.signal()
        return box.wait(timeout: timeout)
    }

    // MARK: The loop

    private func run() {
        defer { finished.signal() }
        do {
            let store = UploaderStore(db: try Database(path: path))
            self.store = store
            // Health's queueDepth is true from the start, not 0 until the first pass.
            let waiting = try store.waiting()
            state.withLock { $0.waiting = waiting }
        } catch {
            logger.error("the upload queue cannot be opened", ["error": "\(error)"])
            return
        }
        while !state.withLock({ $0.stopping }) {
            // A `syncNow` is answered by the pass that starts after it asked, never
            // by one already under way (that one read the state before the request).
            let (forced, waiters) = state.withLock { s in
                defer { s.forced = false; s.waiters = []; s.woken = false }
                return (s.forced, s.waiters)
            }
            var pause: Int64 = 1_000
            var outcome: SyncOutcome?
            do { (pause, outcome) = try pass(forced: forced) } catch {
                logger.error("upload pass failed; trying again", ["error": "\(error)"])
            }
            if let outcome {
                waiters.forEach { $0.resume(outcome) }
            } else if !waiters.isEmpty {
                // No answer yet (a parked batch, a failed pass): the next pass owes it.
                state.withLock { $0.waiters = waiters + $0.waiters; $0.forced = true }
            }
            if pause > 0 { _ = wakeUp.wait(timeout: .now() + .milliseconds(Int(min(pause, 1_000)))) }
        }
    }

    /// One look at the queue: how long to wait before the next (ms), and
    /// what a `syncNow` would be told (nil: nothing to tell yet).
    private func pass(forced: Bool) throws -> (Int64, SyncOutcome?) {
        guard let store else { return (1_000, nil) }
        let (config, authExpired) = try store.sync()
        // The caps hold with or without a config (its defaults until one comes).
        let caps = config ?? SyncConfig(url: "http://unset")
        // Points committed after this mark may be missing from the count below: added on top (one counted
        // twice now and then is harmless, health never says empty while a point waits).
        let mark = state.withLock { $0.noted }
        let (dropped, waiting) = try store.cap(maxRecords: caps.maxRecordsToPersist, maxAgeMs: Int64(caps.maxDaysToPersist * 86_400_000))
        if dropped > 0 {
            publish(.diagnostic(code: "queueCapped", message: "\(dropped) queued point(s) dropped: the queue holds at most "
                                + "\(caps.maxRecordsToPersist) (maxRecordsToPersist) and \(caps.maxDaysToPersist.formatted()) days (maxDaysToPersist)"))
        }
        state.withLock { $0.waiting = waiting + ($0.noted - mark) }
        // Health's `oldestQueuedAgeMs`: how far behind the customer's backend is (absent when nothing waits).
        counters?.set("oldestQueuedAgeMs", try store.oldestWaitingMs().map { max(0, clock.nowMs() - $0) })
        guard let config else { return (1_000, .notConfigured) }
        if authExpired { return (1_000, .authExpired) }
        let nowMs = clock.nowMs()
        if !forced {
            guard config.autoSync, waiting >= config.autoSyncThreshold else { return (1_000, nil) }
            guard nowMs >= nextAttemptMs else { return (nextAttemptMs - nowMs, nil) }
        }
        let batch = try store.batch(limit: config.batchSize)
        guard !batch.isEmpty else { return (1_000, .empty) }
        let rules = DeliveryRules(config)
        var delivered: [Int64] = []
        var verdict = Verdict.delivered
        // OsmAnd sends a request per point: stop at the first that does not go through.
        let requests = Requests.make(batch.map(\.point), config: config)
        let perRequest = config.format == .osmand ? 1 : batch.count
        for (i, request) in requests.enumerated() {
            let exchange = transport.send(request, timeoutMs: config.httpTimeoutMs)
            publish(.httpResponse(statusCode: exchange.statusCode, count: perRequest))
            verdict = rules.verdict(exchange, attempt: attempt, jitter: random(), nowMs: clock.nowMs())
            guard verdict == .delivered else { break }
            delivered += batch[(i * perRequest)..<min(batch.count, (i + 1) * perRequest)].map(\.id)
        }
        if !delivered.isEmpty {
            try store.delete(delivered)
            publish(.uploaded(count: delivered.count))
        }
        switch verdict {
        case .delivered:
            attempt = 0
            return (0, .uploaded(delivered.count))  // more may be waiting
        case .retry(let afterMs, let reason):
            attempt += 1
            nextAttemptMs = clock.nowMs() + afterMs
            publish(.retryScheduled(afterSec: Double(afterMs) / 1000, reason: reason))
            return (afterMs, delivered.isEmpty ? .retry(reason) : .uploaded(delivered.count))
        case .authExpired:
            try store.setAuthExpired()
            publish(.authExpired)
            logger.warning("the endpoint refused the credentials (401): uploads stop until configureSync")
            if config.stopTrackingOnAuthExpiry {
                for device in Set(batch.map(\.point.device)) {
                    try? bus?.publish(MQTTMessage(topic: topics.command(device, "stop"), string: #"{"id":"uploader:authExpired"}"#), acknowledged: nil)
                }
            }
            return (1_000, .authExpired)
        case .parked(let reason):
            let undelivered = batch.map(\.id).filter { !delivered.contains($0) }
            try store.park(config.format == .osmand ? Array(undelivered.prefix(1)) : undelivered)
            publish(.diagnostic(code: "batchParked", message: "\(reason); \(config.format == .osmand ? 1 : undelivered.count) point(s) set aside, the rest goes on"))
            attempt = 0
            // A `syncNow` waiting for this attempt gets the next batch's outcome instead.
            return (0, nil)
        }
    }

    private func publish(_ body: Event.Body) {
        let event = Event(device: .fleet, timeMs: clock.nowMs(), body)
        try? bus?.publish(MQTTMessage(topic: topics.events(.fleet), payload: Array(JSONCoding.encode(event.bounded))), acknowledged: nil)
    }

}

/// A blocking rendezvous for `syncNow` (the query worker's thread waits on it).
final class CheckedContinuationBox: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    private let lock = NSLock()
    private var outcome: SyncOutcome?

    func resume(_ outcome: SyncOutcome) {
        lock.withLock { self.outcome = outcome }
        done.signal()
    }

    func wait(timeout: Duration) -> SyncOutcome? {
        guard done.wait(timeout: .now() + .milliseconds(Int(timeout.milliseconds))) == .success else { return nil }
        return lock.withLock { outcome }
    }
}
