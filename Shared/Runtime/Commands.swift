import Foundation
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
                                  payload: payload ?? Array(JSONCoding.encode(reply)), qos: .atLeastOnce)
        message.correlationData = command.correlationData
        return message
    }
}

extension Topics {
    /// Whether a client may have replies sent to `topic`: anything outside
    /// this deployment's tree, or a `reply` topic inside it — never an
    /// internal or event topic (a forged response topic must not turn a
    /// service into a publisher of `raw`, `points` or someone's `events`).
    public func isReplyTopic(_ topic: String) -> Bool {
        guard topic.hasPrefix(prefix + "/") else { return !topic.isEmpty && !topic.contains("+") && !topic.contains("#") }
        return topic.split(separator: "/", omittingEmptySubsequences: false).dropFirst(2).contains("reply")
    }
}
