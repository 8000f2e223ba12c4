import Bus
import FoundationEssentials
import TrackerLog
import Model
import Store

/// Commands on the network thread: parsed, checked for scope and reply
/// topic, answered inline within the batch or handed to the query worker.
extension ServiceHost {
    func command(_ message: MQTTMessage, device: DeviceID, name: String) {
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
        func storeFailed(_ error: any Error) {
            logger.error("command failed", ["command": name, "device": device.rawValue, "error": "\(error)"])
            batch.effects.items.append(.reply(command, .failure(id: id, CommandError(.internal, "store failed: \(error)"))))
            // SQLite may have ended the whole batch with it.
            if db.isAutocommit { fail(error, culprit: nil) }
        }
        // The device's state first: what loading it said (a row set aside) stands whatever the command does.
        let work: Work<Row>
        do { work = try self.work(device) } catch { return storeFailed(error) }
        let mark = batch.effects.mark
        do {
            let result = try db.transaction { try JSONValue(encoding: run(command, work)) }
            cache.modify(device, work.store)
            batch.effects.items.append(.reply(command, .success(id: id, result)))
        } catch let error as CommandError {
            batch.effects.rewind(to: mark)
            batch.effects.items.append(.reply(command, .failure(id: id, error)))
        } catch {
            batch.effects.rewind(to: mark)
            storeFailed(error)
        }
    }

    /// The command with a response topic its reply may go to; one asking
    /// for any other is refused (`badInput`) on the device's own reply topic
    /// instead, so the asker still learns why, and nothing is sent where the
    /// broker would refuse it or someone else would read it.
    func replyable(_ command: IncomingCommand) -> IncomingCommand? {
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
    func refuseCommandToInvalidDevice(_ message: MQTTMessage, segment: String) {
        let parts = message.topic.split(separator: "/", omittingEmptySubsequences: false)
        guard routes.answersUnknownCommands, parts.count == 4, parts[2] == "cmd" else { return }
        let replyTopic = message.responseTopic.flatMap { topics.mayReply(to: $0, for: segment, outside: replyPrefixes) ? $0 : nil }
            ?? "\(topics.prefix)/\(segment)/reply/\(parts[3])"
        // Refused for its topic whatever it says; an unreadable request just gets no id back.
        let request = try? JSONCoding.decoder.decode(CommandRequest.self, from: Data(message.payload))
        let reply = CommandReply.failure(id: request?.id, CommandError(.badInput,
            "device: '\(segment.prefix(80))' is not a device id (1–64 of A-Z a-z 0-9 . _ -, not starting with _ except _fleet)"))
        var out = MQTTMessage(topic: replyTopic, payload: JSONCoding.bytes(reply))
        out.correlationData = message.correlationData
        batch.effects.items.append(.publish(out))
    }
}
