import Bus
import Dispatch
import FoundationEssentials
import Model
import Synchronization
import TrackerLog

/// What reaches a partitioned service on the contract's topics (a device's
/// fixes, OwnTracks messages, commands, another service's events), taken by
/// the service's ingress session and published again under the device's
/// partition, where its owner reads. The batch it came in is acknowledged
/// only once the broker holds every copy, so a message taken is never lost
/// with the instance.
final class Forwarder: @unchecked Sendable {
    /// A contract filter the ingress subscribes to, its levels split once,
    /// and the payload test of the input it stands for.
    struct Filter {
        let filter: String
        let levels: [Substring]
        let wanted: (([UInt8]) -> Bool)?
    }
    let topics: Topics
    let partitioning: Partitioning
    let output: MQTTClient
    let logger: Logger
    let filters: [Filter]
    /// Whether a command name is this service's (another's is forwarded by that service's ingress).
    let answers: (String) -> Bool
    /// How the partitions' replies to a `_fleet` command become one, and how long they may take.
    let fleetReplies: (String) -> (how: FleetReplies, timeoutMs: Int64?)
    /// Where the partitions' replies to a `_fleet` command come back (`{prefix}/_fanin/reply/{service}`).
    let fanInTopic: String
    let replyPrefixes: [String]
    let clock: any WallClock
    let counters: HealthCounters
    /// Copies the broker has not acknowledged yet: entered on publish, left on the broker's answer.
    private let unacknowledged = DispatchGroup()
    private let gathers: Mutex<FleetGather>

    /// A gather waits this long for every partition, unless its route says
    /// longer: a partition's answer, and a lease's takeover when its instance dies.
    static let gatherTimeoutMs: Int64 = 120_000

    init<Row>(routes: Routes<Row>, service: String, topics: Topics, partitioning: Partitioning, output: MQTTClient,
              maxReplyBytes: Int, replyPrefixes: [String], clock: any WallClock, counters: HealthCounters, logger: Logger) {
        self.topics = topics; self.partitioning = partitioning; self.output = output; self.logger = logger
        self.replyPrefixes = replyPrefixes; self.clock = clock; self.counters = counters
        filters = routes.forwardedFilters(topics).map {
            Filter(filter: $0.filter, levels: $0.filter.split(separator: "/", omittingEmptySubsequences: false), wanted: $0.wanted)
        }
        answers = { routes.answers(command: $0) }
        fleetReplies = { routes.fleetReplies(command: $0) }
        fanInTopic = topics.fanInReply(service)
        gathers = Mutex(FleetGather(partitions: partitioning.count, timeoutMs: Self.gatherTimeoutMs, maxReplyBytes: maxReplyBytes))
    }

    /// What the ingress subscribes to: the contract's filters, and its fan-in replies.
    var subscriptions: [String] { filters.map(\.filter) + [fanInTopic] }

    /// On the ingress connection's network thread.
    func forward(_ message: MQTTMessage) {
        if message.topic == fanInTopic { return gathered(message) }
        let levels = message.topic.split(separator: "/", omittingEmptySubsequences: false)
        // What an unpartitioned run of the service subscribed its session to besides (its internal
        // streams, repaired from the producers' logs by the partitions that own them): counted, not forwarded.
        guard let match = filters.first(where: { Self.matches($0.levels, levels) }) else { return counters.count("notForwarded") }
        if let wanted = match.wanted, !wanted(message.payload) { return }
        if case .command(let device, let name) = topics.parse(message.topic) {
            guard answers(name) else { return }  // another service's: its own instances forward it
            // Every partition holds its share of the fleet's state: each is asked, and the asker gets one reply.
            if device == .fleet { return gather(message, name: name) }
        }
        send(message, to: topics.partition(ofTopic: message.topic, in: partitioning) ?? 0, replying: true)
    }

    private func send(_ message: MQTTMessage, to k: Int, replying: Bool) {
        guard let topic = topics.underPartition(k, message.topic) else { return }
        var copy = MQTTMessage(topic: topic, payload: message.payload, qos: .atLeastOnce)
        if replying { copy.responseTopic = message.responseTopic; copy.correlationData = message.correlationData }
        publish(copy)
    }

    /// Published on the output; the batch in hand is acknowledged once the broker holds it.
    private func publish(_ message: MQTTMessage) {
        unacknowledged.enter()
        do {
            try output.publish(message) { [unacknowledged, logger] result in
                if case .failure(let error) = result { logger.warning("a forwarded message was refused", ["error": "\(error)"]) }
                unacknowledged.leave()
            }
        } catch {
            unacknowledged.leave()
            logger.warning("a message could not be forwarded", ["mqtt.topic": message.topic, "error": "\(error)"])
        }
    }

    /// A message from a removed partition's session (after a repartition):
    /// sent on to its device's partition now; the fleet's and the services'
    /// own (answered or repaired already) are counted, not sent.
    func forwardToOwner(_ message: MQTTMessage) {
        var contract = message
        contract.topic = topics.outsidePartition(message.topic)
        guard let owner = topics.owner(ofTopic: contract.topic, in: partitioning) else { return counters.count("notForwarded") }
        counters.count("forwardedToOwner")
        send(contract, to: owner, replying: true)
    }

    /// A message the service's gate refused: counted as a partition counts
    /// a refusal, and said to the device in an `error` event once.
    func refuse(_ refused: IngressRefusal) {
        counters.error()
        counters.count(refused.refusal.code.rawValue)
        guard refused.refusal.announce else { return }
        let event = Event(device: refused.device, timeMs: clock.nowMs(),
                          .error(code: refused.refusal.code.rawValue, message: refused.refusal.message))
        publish(MQTTMessage(topic: topics.events(refused.device), payload: JSONCoding.bytes(event.bounded)))
    }

    // MARK: Fleet commands

    /// A `_fleet` command, sent to every partition with the fan-in topic to
    /// reply on and `{gather} {k}` as correlation data; a page's request asks
    /// each partition for the first `offset + limit` items.
    private func gather(_ message: MQTTMessage, name: String) {
        // A response topic nobody may be answered on: partition 0 refuses it, saying why, as one unpartitioned host does.
        if let topic = message.responseTopic, !topics.mayReply(to: topic, for: DeviceID.fleet.rawValue, outside: replyPrefixes) {
            return send(message, to: 0, replying: true)
        }
        // The gathers' own topic is no asker's: the answer would pass for a partition's reply.
        if let topic = message.responseTopic, topic.hasPrefix("\(topics.prefix)/_fanin/") {
            counters.count("badResponseTopic")
            let id = (try? JSONCoding.decoder.decode(CommandRequest.self, from: Data(message.payload)))?.id
            return answer(.init(asker: .init(topic: topics.reply(.fleet, name), correlationData: message.correlationData),
                                reply: .failure(id: id, CommandError(.badInput, "responseTopic: '\(topic.prefix(120))' is the partitions' "
                                    + "reply topic, not an asker's (use \(topics.prefix)/_fleet/reply/…)"))))
        }
        let asker = FleetGather.Asker(topic: message.responseTopic ?? topics.reply(.fleet, name), correlationData: message.correlationData)
        let (how, timeoutMs) = fleetReplies(name)
        var payload = message.payload
        var page: FleetGather.Page?
        let request = try? JSONCoding.decoder.decode(CommandRequest.self, from: Data(message.payload))
        // The page the asker asked for, where the replies merge as pages; one it
        // cannot read goes as it came: each partition refuses it by name.
        func asked() -> (args: [String: JSONValue], limit: Int, offset: Int)? {
            guard let request, case .object(let args) = request.args ?? .object([:]),
                  let page = try? JSONCoding.decoder.decode(PageArgs.self, from: JSONCoding.encode(JSONValue.object(args))).validated()
            else { return nil }
            return (args, page.limit, page.offset)
        }
        switch how {
        case .newestFirst:
            guard let request, let (args, limit, offset) = asked() else { break }
            guard offset + limit <= PageArgs.maxLimit else {
                return answer(.init(asker: asker, reply: .failure(id: request.id, CommandError(.badInput,
                    "offset + limit must be ≤ \(PageArgs.maxLimit) for \(DeviceID.fleet) across partitions, got \(offset + limit)"))))
            }
            page = FleetGather.Page(limit: limit, offset: offset)
            // Each partition is asked for its first offset + limit items.
            var all = args
            all["limit"] = .number(Double(offset + limit))
            all["offset"] = .number(0)
            payload = JSONCoding.bytes(CommandRequest(id: request.id, args: .object(all)))
        case .inKeyOrder:
            // Each partition is asked as the asker asked (after its cursor, its limit); the merge keeps the limit.
            page = asked().map { FleetGather.Page(limit: $0.limit, offset: 0) }
        case .same, .combine:
            break
        }
        let id = UUID().uuidString.lowercased()
        let (started, capacity) = gathers.withLock {
            ($0.start(id, asker: asker, how: how, page: page, requestID: request?.id, nowMs: clock.nowMs(), timeoutMs: timeoutMs), $0.capacity)
        }
        guard started else {
            return answer(.init(asker: asker, reply: .failure(id: request?.id, CommandError(.busy,
                "\(capacity) fleet commands are waiting for their partitions already; try again shortly"))))
        }
        for k in 0..<partitioning.count {
            guard let topic = topics.underPartition(k, message.topic) else { continue }
            publish(MQTTMessage(topic: topic, payload: payload, qos: .atLeastOnce, responseTopic: fanInTopic,
                                correlationData: Array("\(id) \(k)".utf8)))
        }
    }

    /// A partition's reply to a gather.
    private func gathered(_ message: MQTTMessage) {
        let parts = String(decoding: message.correlationData ?? [], as: UTF8.self).split(separator: " ")
        guard parts.count == 2, let k = Int(parts[1]) else { return }
        let reply = (try? JSONCoding.decoder.decode(CommandReply.self, from: Data(message.payload)))
            ?? .failure(id: nil, CommandError(.internal, "partition \(k)'s reply was unreadable"))
        if let done = gathers.withLock({ $0.reply(String(parts[0]), partition: k, reply) }) { answer(done) }
    }

    /// Answers every gather past its deadline (`timeout`); called every quarter second.
    func expireGathers() {
        for answer in gathers.withLock({ $0.expire(nowMs: clock.nowMs()) }) { self.answer(answer) }
    }

    private func answer(_ answer: FleetGather.Answer) {
        publish(MQTTMessage(topic: answer.asker.topic, payload: JSONCoding.bytes(answer.reply), qos: .atLeastOnce,
                            correlationData: answer.asker.correlationData))
    }

    /// Before the batch is acknowledged: true once the broker holds every
    /// copy; false after 10 s, and the batch comes again.
    func waitForwarded() -> Bool { unacknowledged.wait(timeout: .now() + .seconds(10)) == .success }

    /// MQTT topic filter matching (`+` one level, `#` the rest), on levels.
    static func matches(_ filter: [Substring], _ topic: [Substring]) -> Bool {
        var f = filter[...]
        var t = topic[...]
        while let level = f.first {
            if level == "#" { return true }
            guard let name = t.first, level == "+" || level == name else { return false }
            f = f.dropFirst(); t = t.dropFirst()
        }
        return t.isEmpty
    }
}
