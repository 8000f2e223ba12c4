import Bus
import FoundationEssentials
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

extension SyncOutcome {
    /// Each partition's outcome as one: the one that needs the operator
    /// most (new credentials, then a retry), else the points uploaded, summed.
    static let acrossPartitions = FleetReplies.combine { results in
        let outcomes = results.map { result -> (name: String, fields: [String: JSONValue]) in
            guard case .object(let fields) = result, case .string(let name) = fields["outcome"] ?? .null else { return ("", [:]) }
            return (name, fields)
        }
        if let worst = outcomes.first(where: { $0.name == "authExpired" }) ?? outcomes.first(where: { $0.name == "retry" }) {
            return .object(worst.fields)
        }
        let uploaded = outcomes.reduce(0.0) { total, outcome in
            if case .number(let n) = outcome.fields["count"] ?? .null { total + n } else { total }
        }
        return outcomes.contains { $0.name == "uploaded" }
            ? .object(["outcome": .string("uploaded"), "count": .number(uploaded)]) : .object(["outcome": .string("empty")])
    }
}

/// The upload loop, an async task with its own store connection: the
/// oldest waiting batch goes out, and its verdict decides (delete, retry
/// later, stop for new credentials, or park it so the rest flows). The host
/// keeps enqueueing meanwhile; nothing here blocks a message or a query.
/// It sleeps until woken (through `wakeups`: new points, a new config, a
/// `syncNow`, stop) or until its pause is over.
final class UploadWorker: LongRunning, @unchecked Sendable {
    // @unchecked: `store`, `attempt` and `nextAttemptMs` are touched by `run` only; the rest is immutable or in `state`.
    private let path: String
    private let transport: any HTTPTransport
    /// Shared with the other partitions' workers of this instance.
    private let turns: UploadTurns
    private let clock: any WallClock
    private let random: @Sendable () -> Double
    private let logger: Logger
    private let topics: Topics
    private let bus: any MessageBus
    private let counters: HealthCounters
    private var store: UploaderStore?
    private let wakeups: AsyncStream<Void>
    private let wakeUp: AsyncStream<Void>.Continuation

    private struct State {
        var stopping = false
        var forced = false
        /// `syncNow` requests waiting for a pass's outcome, by id.
        var waiters: [Int: CheckedContinuation<SyncOutcome?, Never>] = [:]
        var nextWaiterID = 0
        /// Points waiting: kept exact as they come and go, so it may dip below
        /// 0 for a moment (a pass can send a point before the host says it queued it).
        var waiting = 0
        /// Points noted since start and not in a count already, to keep
        /// `waiting` true between passes.
        var noted = 0
        /// The highest row id the last count of the store took in, and the
        /// highest noted since start: a point noted at or below the first
        /// was in that count already (committed before it, noted after).
        var countedThroughID: Int64 = 0
        var newestNotedID: Int64 = 0
        /// A wake-up for new points is signalled and its pass has not started:
        /// more points need no more signals (one per point queued a pass per point).
        var woken = false
        /// While a pass holds fewer than a batch back (`coalesceMs`), the
        /// count that makes a whole batch: reaching it ends the wait.
        var wholeBatch: Int?
    }
    private let state = Mutex(State())

    /// Retry bookkeeping (`run` only).
    private var attempt = 0
    private var nextAttemptMs: Int64 = 0
    /// When this worker's last request ended, and, when the last pass waits
    /// for more points to share the next one, how many make a batch (`run` only).
    private var lastRequestMs = Int64.min
    private var coalescing: Int?
    /// When the points waiting are next counted in the store (`run` only).
    private var nextCountMs: Int64 = 0
    /// `waiting` is kept as points come and go: counting is a scan of the
    /// queue, which every pass made, so a backlog drained ever slower. It is
    /// counted again this often, so nothing could drift from it for long.
    static let countIntervalMs: Int64 = 60_000

    init(path: String, topics: Topics, transport: any HTTPTransport, turns: UploadTurns, clock: any WallClock, logger: Logger,
         bus: any MessageBus, counters: HealthCounters, random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) }) {
        self.path = path; self.topics = topics; self.transport = transport; self.turns = turns; self.clock = clock; self.logger = logger; self.random = random
        self.bus = bus; self.counters = counters
        // One wake-up pending is as good as many.
        (wakeups, wakeUp) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        counters.queueDepth { [weak self] in Int64(max(0, self?.state.withLock { $0.waiting } ?? 0)) }
    }

    func stop() {
        state.withLock { $0.stopping = true }
        turns.withdraw(ObjectIdentifier(self))
        wakeUp.finish()
    }

    /// New points or a new config: look again now.
    func wake() { wakeUp.yield() }

    /// A point was committed to the queue (row `id`): health counts it at
    /// once, a pass sends it.
    func noteQueued(id: Int64) {
        let signal = state.withLock { s -> Bool in
            s.newestNotedID = max(s.newestNotedID, id)
            guard id > s.countedThroughID else { return false }
            s.noted += 1
            s.waiting += 1
            if let whole = s.wholeBatch, s.waiting >= whole {
                s.wholeBatch = nil
                return true
            }
            defer { s.woken = true }
            return !s.woken
        }
        if signal { wakeUp.yield() }
    }

    /// `syncNow`: an attempt now, whatever autoSync and the backoff say;
    /// requests that arrive meanwhile share its outcome. Nil after `timeout`.
    func syncNow(timeout: Duration) async -> SyncOutcome? {
        let id = state.withLock { s in defer { s.nextWaiterID += 1 }; return s.nextWaiterID }
        return await withTaskGroup(of: SyncOutcome?.self) { group in
            group.addTask { [self] in
                await withTaskCancellationHandler {
                    await withCheckedContinuation { (continuation: CheckedContinuation<SyncOutcome?, Never>) in
                        let gone = state.withLock { s -> Bool in
                            guard !s.stopping, !Task.isCancelled else { return true }
                            s.forced = true
                            s.waiters[id] = continuation
                            return false
                        }
                        if gone { continuation.resume(returning: nil) } else { wakeUp.yield() }
                    }
                } onCancel: {
                    state.withLock { $0.waiters.removeValue(forKey: id) }?.resume(returning: nil)
                }
            }
            group.addTask {
                // Cancelled once the outcome came: nothing to say then.
                do { try await Task.sleep(for: timeout) } catch {}
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }

    // MARK: The loop

    func run() async throws {
        do {
            let store = UploaderStore(db: try Database(path: path, logger: logger))
            self.store = store
            // Health's queueDepth is true from the start, not 0 until the first pass.
            try count(store)
        } catch {
            logger.error("the upload queue cannot be opened", ["error": "\(error)"])
            answerWaiters(with: nil)
            throw error
        }
        var wakeups = self.wakeups.makeAsyncIterator()
        while !state.withLock({ $0.stopping }) {
            // A `syncNow` is answered by the pass that starts after it asked, never
            // by one already under way (that one read the state before the request).
            let (forced, waiters) = state.withLock { s in
                defer { s.forced = false; s.waiters = [:]; s.woken = false; s.wholeBatch = nil }
                return (s.forced, s.waiters)
            }
            var pause: Int64 = 1_000
            var outcome: SyncOutcome?
            do { (pause, outcome) = try await pass(forced: forced) } catch {
                logger.error("upload pass failed; trying again", ["error": "\(error)"])
            }
            if let outcome {
                waiters.values.forEach { $0.resume(returning: outcome) }
            } else if !waiters.isEmpty {
                // No answer yet (a parked batch, a failed pass): the next pass owes it.
                state.withLock { s in s.waiters.merge(waiters) { old, _ in old }; s.forced = true }
            }
            guard pause > 0 else { continue }
            // Points queued meanwhile need no pass of their own: they go in the request after the wait,
            // which a whole batch ends.
            if let whole = coalescing { state.withLock { $0.woken = true; $0.wholeBatch = whole } }
            // Until woken, or the pause is over (then the timer wakes it).
            let wait = Duration.milliseconds(min(pause, 1_000))
            await withTaskGroup(of: Void.self) { timer in
                timer.addTask { [wakeUp] in
                    // Cancelled: woken before the pause was over.
                    do { try await Task.sleep(for: wait); wakeUp.yield() } catch {}
                }
                _ = await wakeups.next()
                timer.cancelAll()
            }
        }
        answerWaiters(with: nil)
    }

    /// Counts the points waiting in the store. The host notes a point once
    /// its batch is committed, so a count can take in points not noted yet
    /// (told apart by row id, and not counted again when noted) and miss
    /// points noted already (committed after it: the ids above the count's
    /// up to the newest noted, every one a point, as ids only grow and notes
    /// come in commit order).
    private func count(_ store: UploaderStore) throws {
        let (counted, throughID) = try store.waitingThrough()
        state.withLock { s in
            s.waiting = counted + Int(max(0, s.newestNotedID - throughID))
            s.countedThroughID = max(s.countedThroughID, throughID, s.newestNotedID)
        }
        nextCountMs = clock.nowMs() + Self.countIntervalMs
    }

    /// Stopping: a `syncNow` still waiting is told there is no outcome.
    private func answerWaiters(with outcome: SyncOutcome?) {
        let waiters = state.withLock { s in defer { s.waiters = [:] }; return s.waiters }
        waiters.values.forEach { $0.resume(returning: outcome) }
    }

    /// One look at the queue: how long to wait before the next (ms), and
    /// what a `syncNow` would be told (nil: nothing to tell yet).
    private func pass(forced: Bool) async throws -> (Int64, SyncOutcome?) {
        guard let store else { return (1_000, nil) }
        coalescing = nil
        let (config, authExpired) = try store.sync()
        // The caps hold with or without a config (its defaults until one comes).
        let caps = config ?? SyncConfig(url: "http://unset")
        // Counted again once a minute, and before the caps may drop for
        // `maxRecordsToPersist`, which must not drop on a count kept in memory.
        let full = state.withLock { $0.waiting } > caps.maxRecordsToPersist
        if full || clock.nowMs() >= nextCountMs { try count(store) }
        // Points noted after this mark are not in what the caps start from: added on top.
        let (mark, known) = state.withLock { ($0.noted, $0.waiting) }
        let (dropped, waiting) = try store.cap(maxRecords: caps.maxRecordsToPersist, maxAgeMs: Int64(caps.maxDaysToPersist * 86_400_000),
                                               nowMs: clock.nowMs(), known: known)
        if dropped > 0 {
            publish(.diagnostic(code: "queueCapped", message: "\(dropped) queued point(s) dropped: the queue holds at most "
                                + "\(caps.maxRecordsToPersist) (maxRecordsToPersist) and \(caps.maxDaysToPersist.shortText) days (maxDaysToPersist)"))
        }
        let oldest = try store.oldestWaitingMs()
        if oldest == nil {
            // None waiting in the store: counted (cheap when empty), which ends any drift.
            try count(store)
        } else {
            state.withLock { $0.waiting = waiting + ($0.noted - mark) }
        }
        // Health's `oldestQueuedAgeMs`: how far behind the customer's backend is (absent when nothing waits).
        counters.set("oldestQueuedAgeMs", oldest.map { max(0, clock.nowMs() - $0) })
        guard let config else { return (1_000, .notConfigured) }
        if authExpired { return (1_000, .authExpired) }
        let nowMs = clock.nowMs()
        if !forced {
            guard config.autoSync, waiting >= config.autoSyncThreshold else { return (1_000, nil) }
            guard nowMs >= nextAttemptMs else { return (nextAttemptMs - nowMs, nil) }
            // Less than a batch, soon after the last request: the points that come meanwhile share the next one
            // (OsmAnd sends a request a point: nothing to share). A wall clock set back shortens the wait, never stretches it.
            lastRequestMs = min(lastRequestMs, nowMs)
            let shareUntil = lastRequestMs &+ Int64(config.coalesceMs)
            if config.format == .json, waiting < config.batchSize, nowMs < shareUntil {
                coalescing = config.batchSize
                counters.count("coalesced")
                return (shareUntil - nowMs, nil)
            }
        }
        // The batch is formed in this worker's turn: it takes what came while the others sent.
        guard await turns.begin(ObjectIdentifier(self), unless: { state.withLock { $0.stopping } }) else { return (1_000, nil) }
        defer { turns.end() }
        // Fixed once formed: a retry sends these same points under this same key.
        let (key, batch) = try store.batch(limit: config.batchSize)
        guard !batch.isEmpty else { return (1_000, .empty) }
        let rules = DeliveryRules(config)
        var delivered: [Int64] = []
        var verdict = Verdict.delivered
        // OsmAnd sends a request per point: stop at the first that does not go through.
        let requests = Requests.make(batch.map(\.point), key: key, config: config)
        let perRequest = config.format == .osmand ? 1 : batch.count
        for (i, request) in requests.enumerated() {
            let exchange = await transport.send(request, timeoutMs: config.httpTimeoutMs)
            publish(.httpResponse(statusCode: exchange.statusCode, count: perRequest))
            verdict = rules.verdict(exchange, attempt: attempt, jitter: random(), nowMs: clock.nowMs())
            guard verdict == .delivered else { break }
            delivered += batch[(i * perRequest)..<min(batch.count, (i + 1) * perRequest)].map(\.id)
        }
        lastRequestMs = clock.nowMs()
        if !delivered.isEmpty {
            try store.delete(delivered)
            state.withLock { $0.waiting -= delivered.count }
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
                    send(MQTTMessage(topic: topics.command(device, "stop"), string: #"{"id":"uploader:authExpired"}"#))
                }
            }
            return (1_000, .authExpired)
        case .parked(let reason):
            let undelivered = batch.map(\.id).filter { !delivered.contains($0) }
            let parked = config.format == .osmand ? Array(undelivered.prefix(1)) : undelivered
            try store.park(parked)
            state.withLock { $0.waiting -= parked.count }
            publish(.diagnostic(code: "batchParked", message: "\(reason); \(config.format == .osmand ? 1 : undelivered.count) point(s) set aside, the rest goes on"))
            attempt = 0
            // A `syncNow` waiting for this attempt gets the next batch's outcome instead.
            return (0, nil)
        }
    }

    private func publish(_ body: Event.Body) {
        let event = Event(device: .fleet, timeMs: clock.nowMs(), body)
        send(MQTTMessage(topic: topics.events(.fleet), payload: JSONCoding.bytes(event.bounded)))
    }

    private func send(_ message: MQTTMessage) {
        do { try bus.publish(message, acknowledged: nil) } catch {
            logger.warning("uploader message not published", ["mqtt.topic": message.topic, "error": "\(error)"])
        }
    }
}
