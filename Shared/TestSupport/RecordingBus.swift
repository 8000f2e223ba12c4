import Bus
import Dispatch
import Foundation
import Model
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
    /// Signalled on every publish: a test waits for a message, never for a time.
    private let published = DispatchSemaphore(value: 0)

    public init() {}

    public func publish(_ message: MQTTMessage, acknowledged: MQTTClient.Acknowledgement?) throws {
        state.withLock { s in
            s.sent.append(Sent(message: message, acknowledgement: acknowledged))
            s.unacknowledged.append(s.sent.count - 1)
        }
        published.signal()
    }

    /// The first message matching `condition`, waiting for it to be published
    /// (from another thread: a query's reply) for at most `timeout`.
    public func waitForMessage(timeout: Duration = .seconds(10), where condition: (MQTTMessage) -> Bool) -> MQTTMessage? {
        let deadline = DispatchTime.now() + .milliseconds(Int(timeout.milliseconds))
        while true {
            if let found = messages.first(where: condition) { return found }
            if published.wait(timeout: deadline) == .timedOut { return messages.first(where: condition) }
        }
    }

    public var messages: [MQTTMessage] { state.withLock { $0.sent.map(\.message) } }

    public func messages(topicSuffix suffix: String) -> [MQTTMessage] { messages.filter { $0.topic.hasSuffix(suffix) } }

    /// Messages on topics ending with `suffix` (`"/points"`, `"tracker/van1/points"` …), decoded as `T` (others skipped).
    public func decoded<T: Decodable>(_ type: T.Type, topicSuffix suffix: String) -> [T] {
        messages(topicSuffix: suffix).compactMap { try? JSONCoding.decoder.decode(T.self, from: Data($0.payload)) }
    }

    /// The events published on topics ending with `suffix`, decoded.
    public func events(topicSuffix suffix: String = "/events") -> [Event] { decoded(Event.self, topicSuffix: suffix) }

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

extension Event {
    /// The code of a `diagnostic` event; nil for any other.
    public var diagnosticCode: String? { if case .diagnostic(let code, _) = body { code } else { nil } }
}
