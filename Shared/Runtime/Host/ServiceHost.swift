import Bus
import FoundationEssentials
import TrackerLog
import Model
import Store

/// Runs one service's definition: the only place that knows how messages
/// become committed state and how state becomes published messages.
///
/// - Every message read in one pass of the network loop shares one SQLite
///   transaction (a batch); each message's own changes sit in a savepoint,
///   so a message the service refuses undoes only itself.
/// - The batch commits in the bus's hook between reading and writing, before
///   any acknowledgement leaves; what the batch asked to publish (events,
///   outbox messages, replies) is published only after that commit.
/// - A batch that cannot be stored is rolled back and not acknowledged: the
///   broker redelivers it. A message that fails three times for a reason of
///   its own (not a full disk) is dropped with an `error` event, so it can
///   never block the rest.
///
/// Confinement, not locks: `receive`, `commit`, `tick`, `continueSweep` and
/// `connected` run on the input connection's network thread only
/// (`confine(to:)`; each checks it), `init` before that thread starts and
/// `close` after it ended. That is what `@unchecked Sendable` stands for here.
public final class ServiceHost<Row>: @unchecked Sendable {
    public let name: String
    let db: Database
    let store: HostStore
    let rows: RowCodec<Row>
    let routes: Routes<Row>
    let inputs: [String: InputRoute<Row>]
    let commands: [String: CommandRoute<Row>]
    let retention: [ObjectIdentifier: LogRetention]
    let cache: DeviceCache<DeviceEntry<Row>>
    let outbox: Outbox?
    let bus: any MessageBus
    let topics: Topics
    let logger: Logger
    let counters: HealthCounters
    let clock: any WallClock
    let queries: QueryWorker
    /// The connection whose network thread alone may enter the host (none in tests that drive it directly).
    var owner: MQTTClient?
    /// Holds redelivery back after a failed batch: the runner holds the input
    /// connection's reading for that long (never a sleep on the network thread).
    let pause: (Duration) -> Void
    public let epoch: String
    /// The client id, for the topic repair answers come back on.
    public let instance: String
    /// `{prefix}/_repair/reply/{instance}`: where this consumer's repair answers arrive.
    let repairReplyTopic: String
    /// The stream this service produces (its outbox), if any.
    let stream: InternalStream?
    /// The producers' health topics whose stream tips this service follows: topic → input name.
    let tipTopics: [String: String]
    var repairs: StreamRepairs
    /// Marks committed lately, which answer most tips without a row read.
    var recentMarks = RecentMarks(capacity: 4 * Outbox.tipLimit)
    /// When each producer's health was last read for tips.
    var tipsReadMs: [String: Int64] = [:]
    /// The store was made at this start: history arriving from producers means it was lost.
    let storeIsNew: Bool
    /// Said once: this store started empty beside producers with history.
    var emptyStoreSaid = false
    var rebuildOver = false
    /// Topic prefixes outside `{prefix}/` that replies may go to (`replyTopicPrefixes`).
    let replyPrefixes: [String]
    /// The partition this host runs in a partitioned service: it reads only
    /// that partition's topics (`{prefix}/_p/{k}/…`), each taken as the
    /// contract topic it stands for.
    public let partition: Int?

    var batch = Batch()
    /// What the committed batch publishes, handed to the bus at once.
    let publishing = PublishQueue()
    var attempts = FailedAttempts()
    var consecutiveFailures = 0
    /// Wall-clock time the sweep last asked for its candidates.
    var lastSweepMs: Int64?
    /// The candidates the sweep has not looked at yet (see `continueSweep`).
    var sweepQueue: ArraySlice<DeviceID> = []
    var invalidTopicLogs = RateLimit(perMinute: 10)

    struct Batch {
        let effects = BatchEffects()
        var failure: (any Error)?
        var messages: [UInt64] = []

        mutating func reset() {
            effects.reset()
            failure = nil
            messages.removeAll(keepingCapacity: true)
        }
    }

    public init(_ definition: ServiceDefinition<Row>, databasePath: String, bus: any MessageBus, topics: Topics,
                logger: Logger, counters: HealthCounters, clock: any WallClock = SystemWallClock(),
                cacheCapacity: Int = 10_000, cacheBudgetBytes: Int = 8 << 20, queryBacklog: Int = 64,
                maxReplyBytes: Int = 1 << 20, sqliteCacheKB: Int = Database.defaultCacheKB,
                instance: String? = nil, repair: RepairSettings = RepairSettings(), replyTopicPrefixes: [String] = [],
                partition: Int? = nil, pause: @escaping (Duration) -> Void = { _ in }) throws {
        name = definition.name
        self.partition = partition
        self.instance = instance ?? "tracker-\(definition.name)"
        repairReplyTopic = topics.repairReply(self.instance)
        replyPrefixes = replyTopicPrefixes
        do {
            db = try Database(path: databasePath, cacheKB: sqliteCacheKB, logger: logger)
            // A damaged file stops the service now, by name, not in a crash loop later.
            if let problem = try db.quickCheck() { throw StoreError(code: 11, message: "integrity check failed: \(problem)", sql: nil) }
        } catch {
            throw ConfigError("dataDir", "the store \(databasePath) cannot be used (\(error)); move it aside to start "
                              + "with an empty store (downstream services are told: producerReset), or restore a backup")
        }
        try definition.migrate(db)
        let store = try HostStore(db: db)
        self.store = store
        let identity = try db.transaction { try store.epoch(nowMs: clock.nowMs()) }
        epoch = identity.epoch
        storeIsNew = identity.created
        rows = definition.rows
        var routes = try definition.wire(db)
        // A producer whose device starts over must number on past what it sent: said by the service, never assumed.
        if routes.outbox != nil, routes.startOver == nil {
            throw ConfigError("startOver", "\(name) has an outbox but no startOver: the row a device starts over with when its "
                              + "stored row cannot be read must number on past the last seq sent")
        }
        stream = routes.outbox == nil ? nil : InternalStream.produced(by: name)
        if let stream, let outbox = routes.outbox { routes.commands.append(Self.repairRoute(stream, log: outbox.log, epoch: epoch)) }
        self.routes = routes
        inputs = Dictionary(uniqueKeysWithValues: routes.inputs.map { ($0.name, $0) })
        commands = Dictionary(uniqueKeysWithValues: routes.commands.map { ($0.name, $0) })
        tipTopics = Dictionary(uniqueKeysWithValues: routes.inputs.compactMap { route in
            guard route.sequenced, let producer = InternalStream(rawValue: route.name)?.producer else { return nil }
            return (topics.health(producer), route.name)
        })
        repairs = StreamRepairs(settings: repair)
        retention = Dictionary(uniqueKeysWithValues: routes.retention.map { (ObjectIdentifier($0.log), $0) })
        for capped in routes.retention where capped.maxTotal != nil { capped.total = try capped.log.totalCount() }
        cache = DeviceCache(capacity: cacheCapacity, budgetBytes: cacheBudgetBytes)
        self.bus = bus
        self.topics = topics
        self.logger = logger
        self.counters = counters
        self.clock = clock
        self.pause = pause
        queries = QueryWorker(path: databasePath, capacity: queryBacklog, maxReplyBytes: maxReplyBytes, bus: bus,
                              topics: topics, logger: logger, counters: counters)
        if let route = routes.outbox {
            let topic = route.topic
            let outbox = Outbox(topic: { [topics] in topic(topics, $0) }, clock: clock)
            for (device, acked) in try store.watermarks(in: route.log) { outbox.restore(device, ackedThrough: acked) }
            self.outbox = outbox
            // Health reads it live: the messages the broker has not acknowledged yet.
            counters.queueDepth { Int64(outbox.pendingCount) }
            // And the newest seq of each device that fell quiet: a consumer that lost the tail asks for it.
            if let stream { counters.streams { [epoch] in [stream.rawValue: StreamTips(epoch: epoch, tips: outbox.tips())] } }
        } else {
            outbox = nil
        }
        let owned = Set(CommandCatalog.owned(by: name))
        guard Set(commands.keys) == owned else {
            throw ConfigError("commands", "\(name) answers \(commands.keys.sorted()) but the catalogue lists \(owned.sorted())")
        }
        let worker = routes.worker?.make(bus, counters)
        parts = [Lifecycle.Part("queries", queries, blocking: true)]
            + (worker.map { [Lifecycle.Part("\(definition.name) worker", $0, blocking: true)] } ?? [])
    }

    /// Only `client`'s network thread may call `receive`, `commit`, `tick`,
    /// `continueSweep` and `connected` from now on; `close` only once that
    /// thread has ended. Call before the client connects.
    public func confine(to client: MQTTClient) { owner = client }

    /// The host's own parts, for the process's `Lifecycle`: started before the
    /// input connection and stopped after it, so no message is still being
    /// handled when they wind down.
    public let parts: [Lifecycle.Part]

    /// On the owner's network thread, or while it is not running (before it
    /// starts, after it ended: `close`), or no owner set.
    func checkThread(_ entry: StaticString = #function) {
        guard let owner else { return }
        precondition(owner.isOnNetworkThread || !owner.isRunning, "ServiceHost.\(entry) called off its network thread")
    }

    /// What to subscribe to: every input, and the commands (all names, for the
    /// service that answers unknown ones).
    public var subscriptions: [String] {
        let contract = routes.inputs.map { $0.filter(topics) } + routes.commandFilters(topics) + tipTopics.keys.sorted()
        let own = partition.map { k in contract.compactMap { topics.underPartition(k, $0) } } ?? contract
        return own + (tipTopics.isEmpty ? [] : [repairReplyTopic])
    }


    // MARK: Messages (network thread)

    /// Everything until the next commit shares one transaction.
    func openBatchIfNeeded() {
        guard batch.failure == nil, !db.hasOpenBatch else { return }
        do { try db.openBatch() } catch { fail(error, culprit: nil) }
    }

    public func receive(_ message: MQTTMessage) {
        checkThread()
        if let partition {
            var message = message
            message.topic = topics.outsidePartition(message.topic)
            // After the stores were repartitioned, a session may still hold messages of devices it had under the old count.
            if let partitioning = topics.partitioning, let owner = topics.owner(ofTopic: message.topic, in: partitioning), owner != partition {
                return forward(message, to: owner)
            }
            return take(message)
        }
        take(message)
    }

    /// Sends a device's message on to its partition once the batch is committed; that one applies it.
    private func forward(_ message: MQTTMessage, to owner: Int) {
        openBatchIfNeeded()
        guard batch.failure == nil, let topic = topics.underPartition(owner, message.topic) else { return }
        counters.count("forwardedToOwner")
        batch.effects.items.append(.publish(MQTTMessage(topic: topic, payload: message.payload, qos: .atLeastOnce,
                                                        responseTopic: message.responseTopic, correlationData: message.correlationData)))
    }

    private func take(_ message: MQTTMessage) {
        openBatchIfNeeded()
        // A failed batch is redelivered whole: handling more of it now would be undone anyway.
        guard batch.failure == nil else { return }
        if !tipTopics.isEmpty {
            if message.topic == repairReplyTopic { repaired(message); return }
            if let input = tipTopics[message.topic] { noteTips(message, input: input); return }
        }
        let parsed = topics.parse(message.topic)
        switch parsed {
        case .command(let device, let name):
            command(message, device: device, name: name)
        case .invalidDevice(let segment):
            counters.count("invalidTopic")
            refuseCommandToInvalidDevice(message, segment: segment)
            if invalidTopicLogs.allow(nowMs: clock.nowMs()) {
                logger.warning("payload on a topic with an invalid device id",
                               ["mqtt.topic": String(message.topic.prefix(120)), "device": String(segment.prefix(80))])
            }
        default:
            guard let (device, name) = parsed.input, let route = inputs[name] else { return }
            if let wanted = route.wanted, !wanted(message.payload) { return }
            apply(message, to: device, route: route)
        }
    }

    /// Applies one input message in its own savepoint. A sequenced one is
    /// taken as `gaps` says, by default: held back behind a repair under way,
    /// or, when it follows messages that never came, held while they are asked for.
    func apply(_ message: MQTTMessage, to device: DeviceID, route: InputRoute<Row>, gaps: GapHandling? = nil) {
        // Hashing every message costs; only needed while some message is failing.
        let key = attempts.isEmpty ? nil : FailedAttempts.key(message)
        if let key, attempts.exhausted(key) {
            attempts.forget(key)
            counters.count("dropped")
            counters.error()
            logger.error("message dropped after repeated store failures",
                         ["mqtt.topic": message.topic, "payload": String(decoding: message.payload.prefix(200), as: UTF8.self)])
            batch.effects.items.append(.publish(event(device, .error(code: ErrorCode.internal.rawValue, message:
                "\(route.name): dropped after \(FailedAttempts.limit) failed attempts to store it"))))
            return
        }
        if let key { batch.messages.append(key) }
        let work: Work<Row>
        do { work = try self.work(device, input: route.sequenced ? route.name : nil) } catch { fail(error, culprit: nil); return }
        let stream = StreamRepairs.Key(device: device, input: route.name)
        if route.sequenced { work.gapHandling = gaps ?? (repairs.isPending(stream) ? .hold : .repair) }
        let mark = batch.effects.mark
        do {
            try db.transaction { try route.run(message, work) }
            cache.modify(device, work.store)
        } catch let refusal as InputRefusal {
            batch.effects.rewind(to: mark)
            counters.error()
            if refusal.code != .badInput { counters.count(refusal.code.rawValue) }
            if refusal.announce {
                batch.effects.items.append(.publish(event(device, .error(code: refusal.code.rawValue, message: refusal.message))))
            }
        } catch is Redelivered {
            batch.effects.rewind(to: mark)
            counters.count("redelivered")
        } catch let gap as GapFound {
            batch.effects.rewind(to: mark)
            counters.count("gapsFound")
            if storeIsNew, !emptyStoreSaid, work.input?.mark == nil { sayEmptyStore(route.name, device: device, seq: gap.seq) }
            if let ask = repairs.gap(stream, epoch: gap.epoch, after: gap.after, through: gap.through, seq: gap.seq,
                                     message: message, nowMs: clock.nowMs()) {
                self.ask(ask)
            }
        } catch let held as HeldBack {
            batch.effects.rewind(to: mark)
            // Past the bound it is not held: the next repair fetches it from the producer's log.
            if !repairs.hold(stream, seq: held.seq, message: message) { counters.count("repairHeldDropped") }
        } catch {
            batch.effects.rewind(to: mark)
            fail(error, culprit: key ?? FailedAttempts.key(message))
        }
    }

    /// A device's state for one unit of work (from the cache, else the
    /// store), with the watermark of `input` when it is a sequenced one.
    func work(_ device: DeviceID, input: String? = nil) throws -> Work<Row> {
        let entry = try self.entry(device)
        let work = Work(device: device, nowMs: clock.nowMs(), epoch: epoch, entry: entry, effects: batch.effects, topics: topics,
                        outbox: routes.outbox, acknowledgements: outbox, retention: retention)
        if let input { work.input = (input, entry.inputs[input]) }
        return work
    }

    func entry(_ device: DeviceID) throws -> DeviceEntry<Row> {
        if let cached = cache.get(device) { return cached }
        let (entry, storedBytes, startedOver) = try load(device)
        cache.insertClean(device, entry, storedBytes: storedBytes)
        // Written over the unreadable row with this batch, or set aside again with the next.
        if startedOver { cache.modify(device) { _ in } }
        return entry
    }

    /// The device's entry as stored, and how many bytes it takes there; or,
    /// when its row cannot be read, the row it starts over with.
    func load(_ device: DeviceID) throws -> (DeviceEntry<Row>, storedBytes: Int, startedOver: Bool) {
        guard let stored = try store.entry(device) else {
            return (DeviceEntry(row: rows.fresh(), inputs: [:], ackedThrough: 0), 0, false)
        }
        counters.count("rowLoads")
        let row: Row, startedOver: Bool
        do {
            let (decoded, warning) = try rows.decode(stored.row)
            if let warning { logger.warning(warning, ["device": device.rawValue]) }
            (row, startedOver) = (decoded, false)
        } catch {
            (row, startedOver) = (try startOver(device, unreadable: stored.row, ackedThrough: stored.ackedThrough, error: error), true)
        }
        var inputs: [String: InputMark] = [:]
        do {
            inputs = try StoredInputs.restored(from: stored.inputs, using: JSONCoding.decoder).marks
        } catch {
            // Loud, not silent: every input of this device is applied again from its next message.
            logger.error("stored input watermarks unreadable; they start over", ["device": device.rawValue, "error": "\(error)"])
        }
        return (DeviceEntry(row: row, inputs: inputs, ackedThrough: stored.ackedThrough), stored.row.count + stored.inputs.count, startedOver)
    }

    /// A row that does not decode never decodes: retrying its batch would
    /// stall the service for good. It is kept aside as it was, the device
    /// starts over (a producer numbering on past what it sent), and that is
    /// said loudly once the batch is stored: a log line, health's
    /// `rowsSetAside`, and a `diagnostic`.
    private func startOver(_ device: DeviceID, unreadable: Data, ackedThrough: Int64, error: any Error) throws -> Row {
        // Only within the batch: set aside and written over together, or neither.
        guard db.hasOpenBatch else { throw error }
        let lastSent = max(ackedThrough, try routes.outbox?.log.newestSeq(device) ?? 0)
        let reason = "\(error)"
        // The service's writes for the new row and the set-aside: together or neither.
        let (row, kept) = try db.transaction {
            (try routes.startOver?(device, lastSent) ?? rows.fresh(),
             try store.setAside(device, row: unreadable, error: reason, atMs: clock.nowMs()))
        }
        batch.effects.items.append(.count("rowsSetAside", 1))
        batch.effects.items.append(.afterCommit { [logger] in
            logger.error("a device's stored state cannot be read; it is set aside and the device starts over",
                         ["device": device.rawValue, "error": reason, "lastSent": "\(lastSent)"])
        })
        batch.effects.items.append(.publish(event(device, .diagnostic(code: "stateSetAside", message:
            "\(name): this device's stored state cannot be read (\(reason)); "
            + (kept ? "it is kept in host_set_aside" : "an earlier unreadable one is kept in host_set_aside, this one is not")
            + " and the device starts over"
            + (routes.outbox == nil ? "" : ", numbering on after seq \(lastSent)")))))
        return row
    }

    /// Marks the batch as not storable. A message whose own savepoint failed
    /// for a reason of its own (not the machine's) has the attempt counted.
    func fail(_ error: any Error, culprit: UInt64?) {
        if let culprit, !((error as? StoreError)?.isEnvironmental ?? false) { attempts.record(culprit) }
        if batch.failure == nil { batch.failure = error }
    }

    func event(_ device: DeviceID, _ body: Event.Body) -> MQTTMessage {
        MQTTMessage(topic: topics.events(device), payload: JSONCoding.bytes(Event(device: device, timeMs: clock.nowMs(), body).bounded))
    }

    // MARK: Commit (network thread, before acknowledgements are written)

    /// Writes the changed rows and commits the batch, then publishes what it
    /// produced. Returns false when the batch could not be stored: then
    /// nothing of it is acknowledged, and the broker sends it again.
    public func commit() -> Bool {
        checkThread()
        guard db.hasOpenBatch || batch.failure != nil else { return true }
        if batch.failure == nil {
            // Outbox watermarks written with their rows: unsaved again if the batch fails.
            var carried: [(DeviceID, Int64)] = []
            do {
                var marks: [(DeviceID, [String: InputMark])] = []
                try cache.writeDirty { device, entry in
                    let row = rows.encode(entry.row), inputs = StoredInputs(entry.inputs).stored
                    let acked = outbox?.carry(device)
                    if let acked { carried.append((device, acked)) }
                    try store.save(device, row: row, binary: rows.binary, inputs: inputs, ackedThrough: acked ?? 0)
                    if !tipTopics.isEmpty { marks.append((device, entry.inputs)) }
                    return row.count + inputs.count
                }
                try db.commitBatch()
                for (device, inputs) in marks { recentMarks.record(device, inputs) }
                counters.count("commits")
                cache.markClean()
                batch.messages.forEach { attempts.forget($0) }
                if consecutiveFailures > 0 { counters.note(nil); logger.info("storing again after failed batches", ["failed": "\(consecutiveFailures)"]) }
                consecutiveFailures = 0
                perform(batch.effects)
                batch.reset()
                cache.evictIfNeeded()
                outbox?.forgetSettled()
                return true
            } catch {
                outbox?.unsave(carried)
                batch.failure = error
            }
        }
        return abandonBatch()
    }

    func abandonBatch() -> Bool {
        let error = batch.failure.map { "\($0)" } ?? "unknown"
        let storeError = batch.failure as? StoreError
        do { try db.rollbackBatch() } catch { logger.error("rollback failed", ["error": "\(error)"]) }
        cache.discardDirty()
        // What the repairs held was acknowledged, but the producer's log has it: found and asked for again.
        repairs.reset()
        routes.batchAbandoned?()
        counters.count("storeFailures")
        consecutiveFailures += 1
        if consecutiveFailures == 1, let storeError, storeError.isEnvironmental {
            // Said once per episode, not on every retry: health carries it until a batch is stored again.
            let what = storeError.code & 0xFF == 13 ? "disk full" : "store unavailable"
            counters.note("\(what): nothing can be stored (\(storeError.message)); retrying, nothing is dropped")
            publish(event(.fleet, .error(code: ErrorCode.internal.rawValue, message:
                "\(name): \(what) (\(storeError.message)); messages wait at the broker until they can be stored")))
        }
        logger.error("batch not stored; it will be redelivered", ["error": error])
        batch.reset()
        // The broker redelivers at once: wait a little longer every time (50 ms … 5 s).
        pause(Self.backoff(afterFailures: consecutiveFailures))
        return false
    }

    func perform(_ effects: BatchEffects) {
        if effects.processed > 0 { counters.processed(effects.processed) }
        if effects.errors > 0 { counters.error(effects.errors) }
        if let lag = effects.lagMs { counters.lag(lag) }
        if let age = effects.fixAgeMs { counters.fixAge(age) }
        // The last conflated message per topic wins.
        var latest: [String: Int] = [:]
        for (i, effect) in effects.items.enumerated() { if case .conflated(let topic, _) = effect { latest[topic] = i } }
        // Handed to the bus together (one lock, one wake-up), in order; an
        // action after the commit may publish itself, so what came before it goes first.
        for (i, effect) in effects.items.enumerated() {
            switch effect {
            case .publish(let message): queue(message)
            case .conflated(let topic, let make):
                if latest[topic] == i { queue(make()) } else { counters.count("conflated") }
            case .outbox(let device, let seq, let body):
                // Queued, it cannot fail here; a refusal comes back from the flush.
                try? outbox?.send(device, seq: seq, body: body, on: publishing)
            case .reply(let command, let reply): queue(CommandReplyMessage(command, reply).message(topics))
            case .count(let name, let n): counters.count(name, n)
            case .afterCommit(let action):
                flushPublishing()
                action()
            }
        }
        flushPublishing()
    }

    func queue(_ message: MQTTMessage) { try? publishing.publish(message, acknowledged: nil) }

    func flushPublishing() {
        for (message, error) in publishing.flush(to: bus) {
            logger.warning("message not published (an internal one is republished at the next start)",
                           ["mqtt.topic": message.topic, "error": "\(error)"])
        }
    }

    func publish(_ message: MQTTMessage) {
        do { try bus.publish(message, acknowledged: nil) } catch {
            logger.warning("message not published", ["mqtt.topic": message.topic, "error": "\(error)"])
        }
    }

    // MARK: Periodic work and lifecycle

    /// The periodic sweep, the outbox watermarks and the trims they allow.
    /// The sweep looks at its first slice of candidates here, the rest in
    /// `continueSweep`.
    public func tick() {
        checkThread()
        openBatchIfNeeded()
        periodically {
            let nowMs = clock.nowMs()
            try saveWatermarks(movedByMs: nowMs - Self.quietWatermarkMs, limit: Self.watermarksPerTick)
            try holdLogsToTheirTotals()
            if !tipTopics.isEmpty { repairsDue() }
            // Candidates still queued are still due: asked for again once they are looked at.
            if let sweep = routes.sweep, sweepQueue.isEmpty, lastSweepMs.map({ nowMs - $0 >= sweep.every.milliseconds }) ?? true {
                lastSweepMs = nowMs
                sweepQueue = try sweep.candidates(nowMs)[...]
            }
            try sweepSlice()
        }
    }

    /// Looks at the sweep's next slice of candidates; true while more wait.
    /// Called between passes that read, so fixes arriving meanwhile are not
    /// held up behind a large sweep (a fleet fallen silent at once, each
    /// device releasing fixes it held), and the services after this one
    /// take what it releases a slice at a time, not in one burst (measured:
    /// 68 filter devices releasing about 480 fixes, some 950 messages, in
    /// one commit held 1,000 fixes/s over 10,000 devices up by 50–89 ms at
    /// p99, docs/benchmarks/2026-12-07-sweep.md).
    public func continueSweep() -> Bool {
        checkThread()
        guard !sweepQueue.isEmpty else { return false }
        openBatchIfNeeded()
        periodically { try sweepSlice() }
        return !sweepQueue.isEmpty
    }

    /// Periodic work: what it fails for fails the batch it is part of.
    private func periodically(_ body: () throws -> Void) {
        do { try body() } catch {
            logger.error("periodic work failed", ["error": "\(error)"])
            fail(error, culprit: nil)
        }
    }

    /// The fewest and the most devices a slice of the sweep looks at
    /// (`sweepSliceSize` picks between them), and the messages it may
    /// publish for each: once they are out it takes no further device (one
    /// device's may go past them).
    static var sweepSliceDevices: Int { 8 }
    static var sweepSliceDevicesAtMost: Int { 64 }
    static var sweepSliceMessagesPerDevice: Int { 2 }
    /// How often the loop looks at the next slice while candidates wait
    /// (`continueSweep`): 800 devices a second at the least slice, 6,400 at the largest.
    static var sweepSliceInterval: Duration { .milliseconds(10) }

    /// The devices the next slice looks at: what waits, spread over the
    /// slices left before the next sweep asks for candidates, so that a
    /// fleet whose held fixes all come due (10,000 devices' first fixes)
    /// is released as fast as it comes due, and a few dozen devices are
    /// still spread over tens of milliseconds. Slices come less often
    /// than every interval while fixes are being read, so the share is
    /// counted again at every slice.
    private func sweepSliceSize(nowMs: Int64) -> Int {
        guard let sweep = routes.sweep, let lastSweepMs else { return Self.sweepSliceDevices }
        let intervalMs = max(1, Self.sweepSliceInterval.milliseconds)
        let slicesLeft = max(1, (lastSweepMs + sweep.every.milliseconds - nowMs) / intervalMs)
        let share = Int((Int64(sweepQueue.count) + slicesLeft - 1) / slicesLeft)
        return min(max(share, Self.sweepSliceDevices), Self.sweepSliceDevicesAtMost)
    }

    private func sweepSlice() throws {
        // Not on a batch that failed: what a slice applied would be thrown away with it.
        guard let sweep = routes.sweep, batch.failure == nil, db.hasOpenBatch else { return }
        let devices = sweepSliceSize(nowMs: clock.nowMs()), messages = devices * Self.sweepSliceMessagesPerDevice
        var looked = 0, published = 0
        while let device = sweepQueue.first, looked < devices, published < messages {
            sweepQueue.removeFirst()
            looked += 1
            let work = try self.work(device)
            let mark = batch.effects.mark
            do {
                try db.transaction { try sweep.apply(work) }
            } catch {
                batch.effects.rewind(to: mark)
                throw error
            }
            published += batch.effects.messages(from: mark.count)
            cache.modify(device, work.store)
        }
    }

    /// After each (re)connect; on the first, publish whatever the last run
    /// may not have delivered (later reconnects resend by themselves).
    public func connected(reconnect: Bool) {
        checkThread()
        guard !reconnect, let outbox, let route = routes.outbox else { return }
        do {
            let pending = try store.unacknowledged(in: route.log)
            for (device, seq, body) in pending { try outbox.send(device, seq: seq, body: Array(body.utf8), on: bus) }
            if !pending.isEmpty { logger.info("republished unacknowledged messages", ["count": "\(pending.count)"]) }
        } catch {
            logger.error("cannot read the outbox", ["error": "\(error)"])
        }
    }

    /// Graceful stop, after the network thread and the parts ended: save the
    /// watermarks, and checkpoint so the `.sqlite` file alone holds everything.
    public func close() {
        precondition(!(owner?.isRunning ?? false), "ServiceHost.close() while its network thread runs")
        // Already stopped by the lifecycle; a test that drives the host directly has them stop here.
        parts.forEach { $0.service.stop() }
        openBatchIfNeeded()
        do { try saveWatermarks() } catch { logger.error("cannot save the outbox watermarks", ["error": "\(error)"]) }
        _ = commit()
        do { try db.checkpoint() } catch { logger.error("checkpoint failed", ["error": "\(error)"]) }
    }

    /// How long an outbox watermark may wait unsaved before the tick writes it
    /// alone: a device that keeps sending has it written with its row first,
    /// so the tick writes only the devices that fell quiet. Saved late, it
    /// costs at most a republished message after a crash (consumers skip it).
    static var quietWatermarkMs: Int64 { 5_000 }
    /// Watermarks one tick writes at most (about 20 µs each): a fleet that
    /// fell quiet at once is saved over a few ticks, not in one stall.
    static var watermarksPerTick: Int { 200 }

    /// The pause before a failed batch comes back: doubling from 50 ms, at most 5 s.
    static func backoff(afterFailures n: Int) -> Duration {
        .milliseconds(min(5_000, 50 << min(max(n - 1, 0), 7)))
    }

    /// Devices whose state is in memory now.
    public var cachedDevices: Int { cache.count }
    /// Their estimated memory, in bytes.
    public var cachedBytes: Int { cache.bytes }

    var queueDepthForTests: Int { outbox?.pendingCount ?? 0 }

    func logCountForTests(_ table: String, _ device: String? = nil) throws -> Int {
        guard let device else { return try db.first("SELECT count(*) FROM \(table)") { $0.int(0) } ?? 0 }
        return try db.first("SELECT count(*) FROM \(table) WHERE device = ?", [.text(device)]) { $0.int(0) } ?? 0
    }
}
