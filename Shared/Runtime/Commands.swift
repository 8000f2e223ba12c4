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
        var request = CommandRequest()
        if let key = DuplicateKeys.first(in: message.payload) {
            let command = IncomingCommand(device: device, name: name, request: CommandRequest(),
                                          responseTopic: message.responseTopic, correlationData: message.correlationData)
            return .failure(CommandReplyMessage(command, .failure(id: nil, CommandError(.badInput, "request: key '\(key)' appears twice in one object"))))
        }
        if !blank {
            do {
                request = try JSONCoding.decoder.decode(CommandRequest.self, from: Data(message.payload))
            } catch {
                let command = IncomingCommand(device: device, name: name, request: CommandRequest(),
                                              responseTopic: message.responseTopic, correlationData: message.correlationData)
                // A readable request with an unusable value says which; anything else gets the expected shape.
                var text = "request is not a JSON object {\"id\":…,\"args\":{…}}"
                if let decoding = error as? DecodingError, case .dataCorrupted(let context) = decoding, !context.codingPath.isEmpty {
                    text = DecodingErrorText.describe(decoding)
                }
                return .failure(CommandReplyMessage(command, .failure(id: nil, CommandError(.badInput, text))))
            }
        }
        return .success(IncomingCommand(device: device, name: name, request: request,
                                        responseTopic: message.responseTopic, correlationData: message.correlationData))
    }
}

/// A reply and where it goes: the v5 response topic with the request's
/// correlation data, or else `{prefix}/{device}/reply/{name}` (MQTT 3.1.1).
struct CommandReplyMessage: Error {
    let command: IncomingCommand
    let reply: CommandReply
    init(_ command: IncomingCommand, _ reply: CommandReply) { self.command = command; self.reply = reply }

    func message(_ topics: Topics) -> MQTTMessage {
        var message = MQTTMessage(topic: command.responseTopic ?? topics.reply(command.device, command.name),
                                  payload: Array(JSONCoding.encode(reply)), qos: .atLeastOnce)
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
