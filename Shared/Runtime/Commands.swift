import Foundation
import Bus
import Model

/// A command as a service receives it.
public struct IncomingCommand: Sendable {
    public let device: DeviceID
    public let name: String
    public let request: CommandRequest
    let message: MQTTMessage

    /// The arguments decoded as `T`; a mismatch is a `badInput` naming the problem.
    public func arguments<T: Decodable>(_ type: T.Type) throws(CommandError) -> T {
        do {
            return try (request.args ?? .object([:])).decode(T.self)
        } catch let error as DecodingError {
            throw CommandError(.badInput, "args: \(DecodingErrorText.describe(error))")
        } catch {
            throw CommandError(.badInput, "args: \(error)")
        }
    }
}

/// Parses command requests and sends replies: to the v5 response topic with
/// the request's correlation data, or else to `tracker/{device}/reply/{name}`.
public struct CommandResponder: Sendable {
    public let topics: Topics
    public let client: MQTTClient

    public init(topics: Topics, client: MQTTClient) { self.topics = topics; self.client = client }

    /// Decodes the request; an unreadable one is answered `badInput` here.
    public func parse(_ message: MQTTMessage, device: DeviceID, name: String) -> IncomingCommand? {
        let request: CommandRequest
        if message.payload.isEmpty || message.payload.allSatisfy({ $0 == 0x20 || $0 == 0x0A }) {
            request = CommandRequest()
        } else {
            do {
                request = try JSONCoding.decoder.decode(CommandRequest.self, from: Data(message.payload))
            } catch {
                let command = IncomingCommand(device: device, name: name, request: CommandRequest(), message: message)
                reply(to: command, .failure(id: nil, CommandError(.badInput, "request is not a JSON object {\"id\":…,\"args\":{…}}")))
                return nil
            }
        }
        return IncomingCommand(device: device, name: name, request: request, message: message)
    }

    /// Runs `body` and replies with its result or its error.
    public func answer(_ command: IncomingCommand, _ body: () throws -> any Encodable) {
        let reply: CommandReply
        do {
            reply = .success(id: command.request.id, try JSONValue(encoding: body()))
        } catch let error as CommandError {
            reply = .failure(id: command.request.id, error)
        } catch {
            reply = .failure(id: command.request.id, CommandError(.internal, "\(error)"))
        }
        self.reply(to: command, reply)
    }

    public func reply(to command: IncomingCommand, _ reply: CommandReply) {
        let payload = Array(JSONCoding.encode(reply))
        var message = MQTTMessage(topic: command.message.responseTopic ?? topics.reply(command.device, command.name),
                                  payload: payload, qos: .atLeastOnce)
        message.correlationData = command.message.correlationData
        try? client.publish(message)
    }
}

