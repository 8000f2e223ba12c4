import Bus
import FoundationEssentials
import TrackerLog
import Model
import Store

extension ServiceHost {
    // MARK: Gap repair (network thread)

    /// A store that started empty while its inputs arrive far into their
    /// numbering was deleted or replaced: said once, on the fleet's events
    /// and in health. What the producers' logs still hold comes back by repair.
    func sayEmptyStore(_ input: String, device: DeviceID, seq: Int64) {
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
    func ask(_ ask: StreamRepairs.Ask) {
        guard let stream = InternalStream(rawValue: ask.key.input) else { return }
        counters.count("repairRequests")
        let range = ask.request
        let request = CommandRequest(id: .string(ask.id), args: .object([
            "epoch": .string(range.epoch), "after": .number(Double(range.after)), "through": .number(Double(range.through))]))
        var message = MQTTMessage(topic: topics.command(ask.key.device, stream.repairCommand), payload: JSONCoding.bytes(request))
        message.responseTopic = repairReplyTopic
        message.correlationData = Array(ask.id.utf8)
        batch.effects.items.append(.publish(message))
    }

    /// A producer's answer: the missing messages, applied in order, then
    /// what was held behind them.
    func repaired(_ message: MQTTMessage) {
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
    func finishRepair(_ key: StreamRepairs.Key, reason: StreamGap.Reason) {
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

    static var tipsReadIntervalMs: Int64 { 1_000 }

    /// The last seq applied from an input (within `epoch`, when given: nil for another epoch's).
    func appliedSeq(_ key: StreamRepairs.Key, epoch: String? = nil) -> Int64? {
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
    /// Read at most once a second per producer: its tips repeat in every
    /// health for five minutes, and at a fifth of a second's health interval
    /// decoding each one took a fifth of a consumer's time.
    func noteTips(_ message: MQTTMessage, input: String) {
        let now = clock.nowMs()
        if let last = tipsReadMs[message.topic], now - last < Self.tipsReadIntervalMs, now >= last { return }
        let health: Health
        do { health = try JSONCoding.decoder.decode(Health.self, from: Data(message.payload)) } catch {
            // Another version's or a forged one: it carries no tips this build can use; counted, not fatal.
            counters.count("unreadableHealth")
            return
        }
        tipsReadMs[message.topic] = now  // only a health that was read keeps the next one waiting
        guard let stream = health.streams?[input] else { return }
        for (id, tip) in stream.tips {
            guard let device = DeviceID(id) else { continue }
            // A partition's tips retained from before its stores were repartitioned name devices now elsewhere.
            if let partition, let partitioning = topics.partitioning, partitioning.partition(of: device) != partition { continue }
            let key = StreamRepairs.Key(device: device, input: input)
            // A mark committed lately answers without reading the row; one that is behind is read, being stale.
            if let mark = recentMarks[key], mark.epoch == nil || mark.epoch == stream.epoch, mark.seq >= tip { continue }
            // Another epoch's tips say nothing of this one: its messages' prev does.
            guard !repairs.isPending(key), let applied = appliedSeq(key, epoch: stream.epoch), applied < tip else { continue }
            repairs.noteTip(key, epoch: stream.epoch, tip: tip, nowMs: now)
        }
    }

    /// Repairs that time asks for: asked again, given up, or started from a tip.
    func repairsDue() {
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
