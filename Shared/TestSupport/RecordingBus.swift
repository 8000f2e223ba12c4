import Bus
import Runtime
import Synchronization

/// A bus that keeps what it is given, for tests of a service host without a
/// broker: the test decides when (and whether) the broker "acknowledges".
public final class RecordingBus: MessageBus {
    public struct Sent: Sendable {
        public let message: MQTTMessage
        let acknowledgement: MQTTClient.Acknowledgement?
    }

    private let state = Mutex<(sent: [Sent], unacknowledged: [Int])>(([], []))

    public init() {}

    public func publish(_ message: MQTTMessage, acknowledged: MQTTClient.Acknowledgement?) throws {
        state.withLock { s in
            s.sent.append(Sent(message: message, acknowledgement: acknowledged))
            s.unacknowledged.append(s.sent.count - 1)
        }
    }

    public var messages: [MQTTMessage] { state.withLock { $0.sent.map(\.message) } }

    public func messages(topicSuffix suffix: String) -> [MQTTMessage] { messages.filter { $0.topic.hasSuffix(suffix) } }

    /// The broker acknowledges everything published so far.
    public func acknowledgeAll() {
        let pending = state.withLock { s -> [Sent] in
            defer { s.unacknowledged = [] }
            return s.unacknowledged.map { s.sent[$0] }
        }
        pending.forEach { $0.acknowledgement?(.success(())) }
    }

    public func clear() { state.withLock { $0 = ([], []) } }
}
