import FoundationEssentials
import Bus
import Model

/// A command as a service receives it.
public struct IncomingCommand: Sendable {
    public let device: DeviceID
    public let name: String
    public let request: CommandRequest
    var responseTopic: String?
    let correlationData: [UInt8]?

    /// The arguments decoded as `T`; a mismatch is a `badInput` naming the problem.
    public func arguments<T: Decodable>(_ type: T.Type) throws(CommandError) -> T {
        do {
            return try (request.args ?? .object([:])).decode(T.self)
        } catch let error as DecodingError {
            throw CommandError(.badInput, DecodingErrorText.describe(error, root: "args"))
        } catch {
            throw CommandError(.badInput, "args: unreadable")
        }
    }

    /// Reads a request; an unreadable one comes back as the reply to send.
    static func parse(_ message: MQTTMessage, device: DeviceID, name: String) -> Result<IncomingCommand, CommandReplyMessage> {
        let blank = message.payload.allSatisfy { $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }
        func command(_ request: CommandRequest) -> IncomingCommand {
            IncomingCommand(device: device, name: name, request: request,
                            responseTopic: message.responseTopic, correlationData: message.correlationData)
        }
        func refusal(_ text: String) -> Result<IncomingCommand, CommandReplyMessage> {
            .failure(CommandReplyMessage(command(CommandRequest()), .failure(id: nil, CommandError(.badInput, text))))
        }
        if let key = DuplicateKeys.first(in: message.payload) { return refusal("request: key '\(key)' appears twice in one object") }
        guard !blank else { return .success(command(CommandRequest())) }
        do {
            return .success(command(try JSONCoding.decoder.decode(CommandRequest.self, from: Data(message.payload))))
        } catch let error as DecodingError {
            // A readable request with an unusable value says which; anything else gets the expected shape.
            if case .dataCorrupted(let context) = error, !context.codingPath.isEmpty { return refusal(DecodingErrorText.describe(error)) }
            return refusal("request is not a JSON object {\"id\":…,\"args\":{…}}")
        } catch {
            return refusal("request is not a JSON object {\"id\":…,\"args\":{…}}")
        }
    }
}

/// A reply and where it goes: the v5 response topic with the request's
/// correlation data, or else `{prefix}/{device}/reply/{name}` (MQTT 3.1.1).
struct CommandReplyMessage: Error {
    let command: IncomingCommand
    let reply: CommandReply
    init(_ command: IncomingCommand, _ reply: CommandReply) { self.command = command; self.reply = reply }

    /// The reply as an MQTT message; `payload` when the reply was written already (a page spliced as stored).
    func message(_ topics: Topics, payload: [UInt8]? = nil) -> MQTTMessage {
        var message = MQTTMessage(topic: command.responseTopic ?? topics.reply(command.device, command.name),
                                  payload: payload ?? JSONCoding.bytes(reply), qos: .atLeastOnce)
        message.correlationData = command.correlationData
        return message
    }
}

extension Topics {
    /// Whether a command for `device` may have its reply sent to `topic`:
    /// only where the service may publish and the one who asked may read.
    /// - `{prefix}/{device}/reply/…`: the command's own device (its ACL reads it);
    /// - `{prefix}/_map/{page}/…`: a map page's own area (only that page reads it);
    /// - `{prefix}/_ctl/{client}/…`: an operator tool's area (only operators read it);
    /// - `{prefix}/_repair/reply/{instance}`: a service's repair answers;
    /// - `{prefix}/_fanin/reply/{service}`, for `_fleet` only: a partitioned
    ///   service's ingress, gathering the partitions' replies to a fleet command;
    /// - outside the prefix, only below one of `outside` (the deployment's
    ///   `replyTopicPrefixes`; none by default).
    /// Never an internal or event topic, another device's replies, a wildcard
    /// or `$SYS`: a forged response topic must not turn a service into a
    /// publisher of what its account may not write, or into anyone's inbox.
    public func mayReply(to topic: String, for device: String, outside: [String] = []) -> Bool {
        guard !topic.isEmpty, !topic.contains("+"), !topic.contains("#"), !topic.hasPrefix("$"), topic.utf8.count <= 512 else { return false }
        let levels = topic.split(separator: "/", omittingEmptySubsequences: false)
        guard !levels.contains(where: \.isEmpty) else { return false }
        guard levels.first == Substring(prefix) else {
            return outside.contains { topic.hasPrefix($0.hasSuffix("/") ? $0 : $0 + "/") }
        }
        guard levels.count >= 3 else { return false }
        switch levels[1] {
        case "_map", "_ctl": return levels.count >= 4
        case "_repair": return levels.count == 4 && levels[2] == "reply"
        case "_fanin": return device == DeviceID.fleet.rawValue && levels.count == 4 && levels[2] == "reply"
        default: return levels[1] == Substring(device) && levels[2] == "reply" && levels.count >= 4
        }
    }
}
