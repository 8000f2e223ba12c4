import Bus
import Foundation
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
/// Confinement, not locks: `receive`, `commit`, `tick` and `connected` run on
/// the input connection's network thread only (`confine(to:)`; each checks
/// it), `init` before that thread starts and `close` after it ended. That is
/// what `@unchecked Sendable` stands for here.
public final class ServiceHost<Row>: @unchecked Sendable {
    public let name: String
    let db: Database
    private let store: HostStore
    private let rows: RowCodec<Row>
    private let routes: Routes<Row>
    private let inputs: [String: InputRoute<Row>]
    private let commands: [String: CommandRoute<Row>]
    private let retention: [ObjectIdentifier: LogRetention]
    private let cache: DeviceCache<DeviceEntry<Row>>
    private let outbox: Outbox?
    private let bus: any MessageBus
    private let topics: Topics
    private let logger: Logger
    private let counters: HealthCounters
    private let clock: any WallClock
    private let queries: QueryWorker
    /// The service's own part, if it has one (the uploader's HTTP loop).
    private let worker: (any LongRunning)?
    /// The connection whose network thread alone may enter the host (none in tests that drive it directly).
    private var owner: MQTTClient?
    /// Holds redelivery back after a failed batch: the runner holds the input
    /// connection's reading for that long (never a sleep on the network thread).
    private let pause: (Duration) -> Void
    public let epoch: String
    /// The client id, for the topic repair answers come back on.
    public let instance: String
    /// `{prefix}/_repair/reply/{instance}`: where this consumer's repair answers arrive.
    private let repairReplyTopic: String
    /// The stream this service produces (its outbox), if any.
    private let stream: InternalStream?
    /// The producers' health topics whose stream tips this service follows: topic → input name.
    private let tipTopics: [String: String]
    private var repairs: StreamRepairs
    /// The store was made at this start: history arriving from producers means it was lost.
    private let storeIsNew: Bool
    /// Said once: this store started empty beside producers with history.
    private var emptyStoreSaid = false
    private var rebuildOver = false
    /// Topic prefixes outside `{prefix}/` that replies may go to (`replyTopicPrefixes`).
    private let replyPrefixes: [String]

    private var batch = Batch()
    private var attempts = FailedAttempts()
    private var consecutiveFailures = 0
    /// Wall-clock time the sweep last ran.
    private var lastSweepMs: Int64?
    private var invalidTopicLogs = RateLimit(perMinute: 10)

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
                cacheCapacity: Int = 10_000, queryBacklog: Int = 64, maxReplyBytes: Int = 1 << 20, sqliteCacheKB: Int = 5_000,
                instance: String? = nil, repair: RepairSettings = RepairSettings(), replyTopicPrefixes: [String] = [],
                pause: @escaping (Duration) -> Void = { _ in }) throws {
        name = definition.name
        self.instance = instance ?? "tracker-\(definition.name)"
        repairReplyTopic = topics.repairReply(self.instance)
        replyPrefixes = replyTopicPrefixes
        do {
            db = try Database(path: databasePath, cacheKB: sqliteCacheKB)
            // A damaged file stops the service now, by name, not in a crash loop later.
            if let problem = try db.quickCheck() { throw StoreError(code: 11, message: "integrity check failed: \(problem)", sql: nil) }
        } catch {
            throw ConfigError("dataDir", "the store \(databasePath) cannot be used (\(error)); move it aside to start "
                              + "with an empty store (downstream services are told: producerReset), or restore a backup")
        }
        var migrator = Migrator()
        for (name, sql) in HostStore.migrations + definition.migrations { migrator.register(name, sql) }
        try migrator.migrate(db)
        let store = try HostStore(db: db)
        self.store = store
        let identity = try db.transaction { try store.epoch(nowMs: clock.nowMs()) }
        epoch = identity.epoch
        storeIsNew = identity.created
        rows = definition.rows
        var routes = try definition.wire(db)
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
        cache = DeviceCache(capacity: cacheCapacity)
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
        self.worker = worker
        parts = [Lifecycle.Part("queries", queries, blocking: true)]
            + (worker.map { [Lifecycle.Part("\(definition.name) worker", $0, blocking: true)] } ?? [])
    }

    /// Only `client`'s network thread may call `receive`, `commit`, `tick`
    /// and `connected` from now on; `close` only once that thread has ended.
    /// Call before the client connects.
    public func confine(to client: MQTTClient) { owner = client }

    /// The host's own parts, for the process's `Lifecycle`: started before the
    /// input connection and stopped after it, so no message is still being
    /// handled when they wind down.
    public let parts: [Lifecycle.Part]

    /// On the owner's network thread, or while it is not running (before it
    /// starts, after it ended: `close`), or no owner set.
    private func checkThread(_ entry: StaticString = #function) {
        guard let owner else { return }
        precondition(owner.isOnNetworkThread || !owner.isRunning, "ServiceHost.\(entry) called off its network thread")
    }

    /// What to subscribe to: every input, and the commands (all names, for the
    /// service that answers unknown ones).
    public var subscriptions: [String] {
        routes.inputs.map { $0.filter(topics) }
            + (routes.answersUnknownCommands ? [topics.anyCommand] : routes.commands.map { topics.allCommands(named: $0.name) })
            + (tipTopics.isEmpty ? [] : [repairReplyTopic] + tipTopics.keys.sorted())
    }

    // MARK: Messages (network thread)

    /// Everything until the next commit shares one transaction.
    private func openBatchIfNeeded() {
        guard batch.failure == nil, !db.hasOpenBatch else { return }
        do { try db.openBatch() } catch { fail(error, culprit: nil) }
    }

    public func receive(_ message: MQTTMessage) {
        checkThread()
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
    private func apply(_ message: MQTTMessage, to device: DeviceID, route: InputRoute<Row>, gaps: GapHandling? = nil) {
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

    private func command(_ message: MQTTMessage, device: DeviceID, name: String) {
        guard let route = commands[name] else {
            guard routes.answersUnknownCommands, !CommandCatalog.all.contains(name) else { return }  // another service's
            // Answered however unreadable the request: a typo gets a reply, not a timeout.
            let command: IncomingCommand
            switch IncomingCommand.parse(message, device: device, name: name) {
            case .success(let parsed): command = parsed
            case .failure(let refusal): command = refusal.command
            }
            guard let command = replyable(command) else { return }
            batch.effects.items.append(.reply(command, .failure(id: command.request.id,
                                                                CommandError(.notFound, "no command named '\(name.prefix(80))'"))))
            return
        }
        var command: IncomingCommand
        switch IncomingCommand.parse(message, device: device, name: name) {
        case .success(let parsed): command = parsed
        case .failure(let refusal):
            if let command = replyable(refusal.command) { batch.effects.items.append(.reply(command, refusal.reply)) }
            return
        }
        let id = command.request.id
        guard let checked = replyable(command) else { return }
        command = checked
        switch (route.scope, device.isReserved) {
        case (.device, true):
            batch.effects.items.append(.reply(command, .failure(id: id, CommandError(.badInput, "'\(name)' is a per-device command, not for \(device)"))))
            return
        case (.fleet, false):
            batch.effects.items.append(.reply(command, .failure(id: id, CommandError(.badInput, "'\(name)' is a fleet command: send it to \(DeviceID.fleet)"))))
            return
        default: break
        }
        let run: (IncomingCommand, Work<Row>) throws -> any Encodable
        switch route.kind {
        case .inline(let inline): run = inline
        case .query(let query):
            if !queries.submit(command, query) {
                counters.count("busy")
                batch.effects.items.append(.reply(command, .failure(id: id, CommandError(
                    .busy, "\(queries.capacity) queries are waiting already; try again shortly"))))
            }
            return
        }
        let mark = batch.effects.mark
        do {
            let work = try self.work(device)
            let result = try db.transaction { try JSONValue(encoding: run(command, work)) }
            cache.modify(device, work.store)
            batch.effects.items.append(.reply(command, .success(id: id, result)))
        } catch let error as CommandError {
            batch.effects.rewind(to: mark)
            batch.effects.items.append(.reply(command, .failure(id: id, error)))
        } catch {
            batch.effects.rewind(to: mark)
            logger.error("command failed", ["command": name, "device": device.rawValue, "error": "\(error)"])
            batch.effects.items.append(.reply(command, .failure(id: id, CommandError(.internal, "store failed: \(error)"))))
            // SQLite may have ended the whole batch with it.
            if db.isAutocommit { fail(error, culprit: nil) }
        }
    }

    /// The command with a response topic its reply may go to; one asking
    /// for any other is refused (`badInput`) on the device's own reply topic
    /// instead, so the asker still learns why, and nothing is sent where the
    /// broker would refuse it or someone else would read it.
    private func replyable(_ command: IncomingCommand) -> IncomingCommand? {
        guard let topic = command.responseTopic, !topics.mayReply(to: topic, for: command.device.rawValue, outside: replyPrefixes) else {
            return command
        }
        var refused = command
        refused.responseTopic = nil
        counters.count("badResponseTopic")
        batch.effects.items.append(.reply(refused, .failure(id: command.request.id, CommandError(.badInput,
            "responseTopic: '\(topic.prefix(120))' is not a reply topic for \(command.device) (use \(topics.prefix)/\(command.device)/reply/…)"))))
        return nil
    }

    /// A command on `{prefix}/{bad id}/cmd/{name}` still gets an answer
    /// (from the one service that answers unknown commands).
    private func refuseCommandToInvalidDevice(_ message: MQTTMessage, segment: String) {
        let parts = message.topic.split(separator: "/", omittingEmptySubsequences: false)
        guard routes.answersUnknownCommands, parts.count == 4, parts[2] == "cmd" else { return }
        let replyTopic = message.responseTopic.flatMap { topics.mayReply(to: $0, for: segment, outside: replyPrefixes) ? $0 : nil }
            ?? "\(topics.prefix)/\(segment)/reply/\(parts[3])"
        // Refused for its topic whatever it says; an unreadable request just gets no id back.
        let request = try? JSONCoding.decoder.decode(CommandRequest.self, from: Data(message.payload))
        let reply = CommandReply.failure(id: request?.id, CommandError(.badInput,
            "device: '\(segment.prefix(80))' is not a device id (1–64 of A-Z a-z 0-9 . _ -, not starting with _ except _fleet)"))
        var out = MQTTMessage(topic: replyTopic, payload: Array(JSONCoding.encode(reply)))
        out.correlationData = message.correlationData
        batch.effects.items.append(.publish(out))
    }

    // MARK: Gap repair (network thread)

    /// A store that started empty while its inputs arrive far into their
    /// numbering was deleted or replaced: said once, on the fleet's events
    /// and in health. What the producers' logs still hold comes back by repair.
    private func sayEmptyStore(_ input: String, device: DeviceID, seq: Int64) {
        emptyStoreSaid = true
        let text = "\(name): the store started empty (\(db.path)) while '\(input)' arrives at seq \(seq) for \(device): it was deleted "
            + "or replaced; what the producers' logs still hold is being fetched again, the rest is reported as streamGap"
        logger.error("the store started empty beside producers with history", ["input": input, "device": device.rawValue, "seq": "\(seq)"])
        counters.count("emptyStore")
        counters.note(text)
        batch.effects.items.append(.publish(event(.fleet, .diagnostic(code: "emptyStore", message: text))))
    }

    /// Asks the producer for the messages an input missed; the answer comes
    /// back on this instance's repair topic, in a later batch.
    private func ask(_ ask: StreamRepairs.Ask) {
        guard let stream = InternalStream(rawValue: ask.key.input) else { return }
        counters.count("repairRequests")
        let range = ask.request
        let request = CommandRequest(id: .string(ask.id), args: .object([
            "epoch": .string(range.epoch), "after": .number(Double(range.after)), "through": .number(Double(range.through))]))
        var message = MQTTMessage(topic: topics.command(ask.key.device, stream.repairCommand), payload: Array(JSONCoding.encode(request)))
        message.responseTopic = repairReplyTopic
        message.correlationData = Array(ask.id.utf8)
        batch.effects.items.append(.publish(message))
    }

    /// A producer's answer: the missing messages, applied in order, then
    /// what was held behind them.
    private func repaired(_ message: MQTTMessage) {
        let reply: RepairReply
        do {
            reply = try JSONCoding.decoder.decode(RepairReply.self, from: Data(message.payload))
        } catch {
            counters.count("repairStale")
            logger.warning("unreadable answer on the repair topic", ["error": DecodingErrorText.describe(any: error)])
            return
        }
        guard let id = reply.id?.stringValue, let key = repairs.key(answering: id), let route = inputs[key.input] else {
            counters.count("repairStale")  // an answer to a repair given up, or not ours
            return
        }
        guard reply.ok, let result = reply.result else {
            // Its store was replaced: the range asked for is gone. Anything else (busy) is asked again.
            if reply.code == ErrorCode.notFound.rawValue { finishRepair(key, reason: .producerReset) }
            return
        }
        let through = repairs.pending[key]?.through ?? 0
        for body in result.messages {
            apply(MQTTMessage(topic: "\(topics.prefix)/\(key.device)/\(key.input)", payload: Array(body.utf8)), to: key.device,
                  route: route, gaps: .accept(.trimmed, through: through))
            guard batch.failure == nil else { return }
        }
        counters.count("repaired", Int64(result.messages.count))
        if result.more, let after = appliedSeq(key) {
            if let again = repairs.askAgain(key, after: after, nowMs: clock.nowMs()) { ask(again) }
        } else {
            finishRepair(key, reason: .trimmed)
        }
    }

    /// Ends a repair: what the producer could not give is reported once and
    /// skipped, and the held messages are applied.
    private func finishRepair(_ key: StreamRepairs.Key, reason: StreamGap.Reason) {
        guard let pending = repairs.finish(key), let route = inputs[key.input] else { return }
        for held in pending.held {
            apply(held.message, to: key.device, route: route,
                  gaps: .accept(reason, through: reason == .producerReset ? .max : pending.through))
            guard batch.failure == nil else { return }
        }
        // Nothing held came after the range (a lost tail): move past what did not come.
        guard !repairs.isPending(key), let applied = appliedSeq(key, epoch: pending.epoch), applied < pending.through else { return }
        do {
            let work = try self.work(key.device, input: key.input)
            work.skip(to: pending.through, epoch: pending.epoch,
                      gap: StreamGap(stream: key.input, from: applied + 1, to: pending.through, reason: reason))
            cache.modify(key.device, work.store)
        } catch {
            fail(error, culprit: nil)
        }
    }

    /// The last seq applied from an input (within `epoch`, when given: nil for another epoch's).
    private func appliedSeq(_ key: StreamRepairs.Key, epoch: String? = nil) -> Int64? {
        let entry: DeviceEntry<Row>
        do { entry = try self.entry(key.device) } catch {
            fail(error, culprit: nil)  // the store cannot be read: the batch is redelivered, the repair found again
            return nil
        }
        let mark = entry.inputs[key.input]
        if let epoch, let markEpoch = mark?.epoch, markEpoch != epoch { return nil }
        return mark?.seq ?? 0
    }

    /// A producer's health: for each device that fell quiet, the newest seq it
    /// sent. One ahead of what was applied (after a grace) is a lost tail.
    private func noteTips(_ message: MQTTMessage, input: String) {
        let health: Health
        do { health = try JSONCoding.decoder.decode(Health.self, from: Data(message.payload)) } catch {
            // Another version's or a forged one: it carries no tips this build can use; counted, not fatal.
            counters.count("unreadableHealth")
            return
        }
        guard let stream = health.streams?[input] else { return }
        let now = clock.nowMs()
        for (id, tip) in stream.tips {
            guard let device = DeviceID(id) else { continue }
            let key = StreamRepairs.Key(device: device, input: input)
            // Another epoch's tips say nothing of this one: its messages' prev does.
            guard !repairs.isPending(key), let applied = appliedSeq(key, epoch: stream.epoch), applied < tip else { continue }
            repairs.noteTip(key, epoch: stream.epoch, tip: tip, nowMs: now)
        }
    }

    /// Repairs that time asks for: asked again, given up, or started from a tip.
    private func repairsDue() {
        let now = clock.nowMs()
        let (retries, expired, tips) = repairs.due(nowMs: now)
        for retry in retries { ask(retry) }
        for key in expired {
            logger.warning("no answer to a repair request; going on without the messages",
                           ["device": key.device.rawValue, "input": key.input])
            finishRepair(key, reason: .noAnswer)
        }
        for (key, tip) in tips {
            guard let applied = appliedSeq(key, epoch: tip.epoch), applied < tip.tip,
                  let ask = repairs.startFromTip(key, epoch: tip.epoch, after: applied, through: tip.tip, nowMs: now) else { continue }
            counters.count("gapsFound")
            self.ask(ask)
        }
        counters.set("repairsPending", repairs.pending.isEmpty ? nil : Int64(repairs.pending.count))
        // The rebuild of an empty store is over once nothing waits for repair.
        if emptyStoreSaid, repairs.pending.isEmpty, consecutiveFailures == 0, !rebuildOver { rebuildOver = true; counters.note(nil) }
    }

    /// `repair{Stream}`: the stored messages of the asked range, oldest
    /// first, bounded in bytes (`more` when cut short: ask again after the last).
    static func repairRoute(_ stream: InternalStream, log: DeviceLog, epoch: String) -> CommandRoute<Row> {
        let table = log.table
        return .query(stream.repairCommand) { command, query in
            let args = try command.arguments(RepairRequest.self)
            guard args.epoch == epoch else {
                throw CommandError(.notFound, "epoch: this store is \(epoch), not \(args.epoch) (it was replaced; that range is gone)")
            }
            guard args.after >= 0, args.through >= args.after else {
                throw CommandError(.badInput, "after and through: need 0 ≤ after ≤ through, got \(args.after) and \(args.through)")
            }
            let limit = 5_000
            let entries = try query.log(table).entries(query.device, after: args.after, through: args.through, limit: limit)
            // Each body travels as a JSON string: escaping can double its quotes, so half the reply's bound.
            let page = JSONPage(bounding: entries.map(\.body), offset: 0, maxBytes: query.maxReplyBytes / 2)
            let more = page.nextOffset != nil || (entries.count == limit && entries.last.map { $0.seq < args.through } == true)
            return .value(RepairAnswer(messages: page.bodies, more: more))
        }
    }

    /// A device's state for one unit of work (from the cache, else the
    /// store), with the watermark of `input` when it is a sequenced one.
    private func work(_ device: DeviceID, input: String? = nil) throws -> Work<Row> {
        let entry = try self.entry(device)
        let work = Work(device: device, nowMs: clock.nowMs(), epoch: epoch, entry: entry, effects: batch.effects, topics: topics,
                        outbox: routes.outbox, acknowledgements: outbox, retention: retention)
        if let input { work.input = (input, entry.inputs[input]) }
        return work
    }

    private func entry(_ device: DeviceID) throws -> DeviceEntry<Row> {
        if let cached = cache.get(device) { return cached }
        let entry = try load(device)
        cache.insertClean(device, entry)
        return entry
    }

    private func load(_ device: DeviceID) throws -> DeviceEntry<Row> {
        guard let stored = try store.entry(device) else {
            return DeviceEntry(row: rows.fresh(), inputs: [:], ackedThrough: 0)
        }
        let (row, warning) = try rows.decode(stored.row)
        if let warning { logger.warning(warning, ["device": device.rawValue]) }
        var inputs: [String: InputMark] = [:]
        do {
            inputs = try JSONCoding.decoder.decode([String: InputMark].self, from: stored.inputs)
        } catch {
            // Loud, not silent: every input of this device is applied again from its next message.
            logger.error("stored input watermarks unreadable; they start over", ["device": device.rawValue, "error": "\(error)"])
        }
        return DeviceEntry(row: row, inputs: inputs, ackedThrough: stored.ackedThrough)
    }

    /// Marks the batch as not storable. A message whose own savepoint failed
    /// for a reason of its own (not the machine's) has the attempt counted.
    private func fail(_ error: any Error, culprit: UInt64?) {
        if let culprit, !((error as? StoreError)?.isEnvironmental ?? false) { attempts.record(culprit) }
        if batch.failure == nil { batch.failure = error }
    }

    private func event(_ device: DeviceID, _ body: Event.Body) -> MQTTMessage {
        MQTTMessage(topic: topics.events(device), payload: Array(JSONCoding.encode(Event(device: device, timeMs: clock.nowMs(), body).bounded)))
    }

    // MARK: Commit (network thread, before acknowledgements are written)

    /// Writes the changed rows and commits the batch, then publishes what it
    /// produced. Returns false when the batch could not be stored: then
    /// nothing of it is acknowledged, and the broker sends it again.
    public func commit() -> Bool {
        checkThread()
        guard db.hasOpenBatch || batch.failure != nil else { return true }
        if batch.failure == nil {
            do {
                for (device, entry) in cache.dirtyEntries {
                    try store.save(device, row: rows.encode(entry.row), inputs: Array(JSONCoding.encode(entry.inputs)))
                }
                try db.commitBatch()
                counters.count("commits")
                cache.markClean()
                batch.messages.forEach { attempts.forget($0) }
                if consecutiveFailures > 0 { counters.note(nil); logger.info("storing again after failed batches", ["failed": "\(consecutiveFailures)"]) }
                consecutiveFailures = 0
                perform(batch.effects)
                batch.reset()
                cache.evictIfNeeded()
                return true
            } catch {
                batch.failure = error
            }
        }
        return abandonBatch()
    }

    private func abandonBatch() -> Bool {
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

    private func perform(_ effects: BatchEffects) {
        if effects.processed > 0 { counters.processed(effects.processed) }
        if effects.errors > 0 { counters.error(effects.errors) }
        if let lag = effects.lagMs { counters.lag(lag) }
        // The last conflated message per topic wins.
        var latest: [String: Int] = [:]
        for (i, effect) in effects.items.enumerated() { if case .conflated(let topic, _) = effect { latest[topic] = i } }
        for (i, effect) in effects.items.enumerated() {
            switch effect {
            case .publish(let message): publish(message)
            case .conflated(let topic, let make):
                if latest[topic] == i { publish(make()) } else { counters.count("conflated") }
            case .outbox(let device, let seq, let body):
                do { try outbox?.send(device, seq: seq, body: body, on: bus) } catch {
                    logger.warning("internal message refused by the client; republished at the next start",
                                   ["device": device.rawValue, "seq": "\(seq)", "error": "\(error)"])
                }
            case .reply(let command, let reply): publish(CommandReplyMessage(command, reply).message(topics))
            case .count(let name, let n): counters.count(name, n)
            case .afterCommit(let action): action()
            }
        }
    }

    private func publish(_ message: MQTTMessage) {
        do { try bus.publish(message, acknowledged: nil) } catch {
            logger.warning("message not published", ["mqtt.topic": message.topic, "error": "\(error)"])
        }
    }

    // MARK: Periodic work and lifecycle

    /// The periodic sweep, the outbox watermarks and the trims they allow.
    public func tick() {
        checkThread()
        openBatchIfNeeded()
        do {
            try saveWatermarks()
            try holdLogsToTheirTotals()
            if !tipTopics.isEmpty { repairsDue() }
            let nowMs = clock.nowMs()
            if let sweep = routes.sweep, lastSweepMs.map({ nowMs - $0 >= sweep.every.milliseconds }) ?? true {
                lastSweepMs = nowMs
                for device in try sweep.candidates(nowMs) {
                    let work = try self.work(device)
                    let mark = batch.effects.mark
                    do {
                        try db.transaction { try sweep.apply(work) }
                    } catch {
                        batch.effects.rewind(to: mark)
                        throw error
                    }
                    cache.modify(device, work.store)
                }
            }
        } catch {
            logger.error("periodic work failed", ["error": "\(error)"])
            fail(error, culprit: nil)
        }
    }

    /// Saves the outbox watermarks that moved and trims the outbox log below them.
    private func saveWatermarks() throws {
        guard let outbox, let route = routes.outbox else { return }
        let moved = outbox.takeUnsaved()
        do {
            let outboxRetention = retention[ObjectIdentifier(route.log)]
            let keep = Int64(outboxRetention?.keep ?? 0)
            for (device, acked) in moved {
                try store.saveAckedThrough(device, acked)
                if let highest = outbox.highestSent(device) {
                    let trimmed = try route.log.trim(device, through: min(acked, highest - keep))
                    outboxRetention?.total -= trimmed
                }
            }
        } catch {
            outbox.unsave(moved)
            throw error
        }
    }

    /// A log over its `maxTotal` is cut to an equal share per device (to 90 %
    /// of the total, so this runs seldom); an outbox never below what the
    /// broker acknowledged. The share stays while the fleet needs it.
    private func holdLogsToTheirTotals() throws {
        for capped in routes.retention {
            guard let maxTotal = capped.maxTotal else { continue }
            if capped.total <= maxTotal {
                if let share = capped.share, capped.total < maxTotal / 2, share < capped.keepPerDevice { capped.share = nil }
                continue
            }
            let devices = try store.devices()
            let share = max(1, maxTotal * 9 / 10 / max(1, devices.count))
            capped.share = share
            let isOutbox = capped.log === routes.outbox?.log
            for (device, saved) in devices {
                guard let newest = try capped.log.newestSeq(device) else { continue }
                var through = newest - Int64(share)
                if isOutbox { through = min(through, max(saved, outbox?.ackedThrough(device) ?? 0)) }
                try capped.log.trim(device, through: through)
            }
            capped.total = try capped.log.totalCount()
            counters.count("logsCapped")
            logger.info("log held to its total; each device keeps an equal share",
                        ["log": capped.log.table, "maxTotal": "\(maxTotal)", "share": "\(share)", "devices": "\(devices.count)"])
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

    /// The pause before a failed batch comes back: doubling from 50 ms, at most 5 s.
    static func backoff(afterFailures n: Int) -> Duration {
        .milliseconds(min(5_000, 50 << min(max(n - 1, 0), 7)))
    }

    /// Devices whose state is in memory now.
    public var cachedDevices: Int { cache.count }

    var queueDepthForTests: Int { outbox?.pendingCount ?? 0 }

    func logCountForTests(_ table: String, _ device: String? = nil) throws -> Int {
        guard let device else { return try db.first("SELECT count(*) FROM \(table)") { $0.int(0) } ?? 0 }
        return try db.first("SELECT count(*) FROM \(table) WHERE device = ?", [.text(device)]) { $0.int(0) } ?? 0
    }
}

/// What `repair{Stream}` answers.
struct RepairAnswer: Codable {
    /// The stored messages, oldest first, each as the JSON text it was published as.
    var messages: [String]
    /// Cut short: more of the range remains.
    var more: Bool
}

/// A reply to a repair request, as it comes back.
struct RepairReply: Decodable {
    var id: JSONValue?
    var ok: Bool
    var code: String?
    var result: RepairAnswer?
}

/// How often each message failed to be stored, so one that keeps failing for
/// a reason of its own is dropped (loudly) instead of blocking the queue.
struct FailedAttempts {
    static let limit = 3
    private var counts: [UInt64: Int] = [:]

    static func key(_ message: MQTTMessage) -> UInt64 {
        // FNV-1a over topic and payload: the same message redelivered has the same key.
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in message.topic.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        for byte in message.payload { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        return hash
    }

    var isEmpty: Bool { counts.isEmpty }

    func exhausted(_ key: UInt64) -> Bool { counts[key, default: 0] >= Self.limit }

    mutating func record(_ key: UInt64) {
        if counts.count > 10_000 { counts.removeAll() }  // bounded: a storm of distinct failures starts the count over
        counts[key, default: 0] += 1
    }

    mutating func forget(_ key: UInt64) { if !counts.isEmpty { counts[key] = nil } }
}

/// At most `perMinute` log lines a minute for one noisy cause.
struct RateLimit {
    let perMinute: Int
    private var windowStartMs: Int64?
    private var used = 0

    init(perMinute: Int) { self.perMinute = perMinute }

    mutating func allow(nowMs: Int64) -> Bool {
        if windowStartMs.map({ nowMs - $0 >= 60_000 }) ?? true { windowStartMs = nowMs; used = 0 }
        used += 1
        return used <= perMinute
    }
}
