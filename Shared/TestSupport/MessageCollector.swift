import Bus
import Dispatch
import Foundation
import Model
import Synchronization

/// Collects every message on some topics and lets a test wait, with a
/// bounded deadline, until what it expects has arrived. Waiting is driven
/// by arrivals (no polling, no sleeping).
public final class MessageCollector: Sendable {
    public let client: MQTTClient
    private let state = Mutex(State())

    private struct State {
        var messages: [MQTTMessage] = []
        /// Messages per last topic level ("raw", "events" …), kept as they arrive.
        var countsByLeaf: [Substring: Int] = [:]
        var waiters: [Int: Waiter] = [:]
        var nextID = 0
    }

    private struct Waiter {
        let leafCount: (leaf: Substring, count: Int)?
        let condition: @Sendable ([MQTTMessage]) -> Bool
        let continuation: CheckedContinuation<[MQTTMessage], any Error>
    }

    public init(port: Int32, filters: [String], clientID: String = "collector-\(UUID().uuidString.prefix(8))",
                username: String? = nil, password: String? = nil, persistentSession: Bool = false) async throws {
        client = try MQTTClient(MQTTOptions(port: port, clientID: clientID, cleanStart: !persistentSession,
                                            sessionExpirySec: persistentSession ? 600 : 0, username: username, password: password))
        client.setHandler { [weak self] message in
            guard let self else { return }
            let ready = self.state.withLock { s -> [(Waiter, [MQTTMessage])] in
                s.messages.append(message)
                if let leaf = message.topic.split(separator: "/").last { s.countsByLeaf[leaf, default: 0] += 1 }
                let all = s.messages
                let counts = s.countsByLeaf
                let ready = s.waiters.filter { _, w in
                    if let (leaf, count) = w.leafCount { return counts[leaf, default: 0] >= count }
                    return w.condition(all)
                }
                for id in ready.keys { s.waiters[id] = nil }
                return ready.values.map { ($0, all) }
            }
            ready.forEach { $0.0.continuation.resume(returning: $0.1) }
        }
        try await client.connect()
        try await client.subscribe(filters)
    }

    public var messages: [MQTTMessage] { state.withLock { $0.messages } }

    /// Messages on topics ending with `suffix` (e.g. "/raw"), decoded as `T`.
    public func decoded<T: Decodable>(_ type: T.Type, topicSuffix suffix: String) -> [T] {
        messages.filter { $0.topic.hasSuffix(suffix) }.compactMap { try? JSONCoding.decoder.decode(T.self, from: Data($0.payload)) }
    }

    public func events() -> [Event] { decoded(Event.self, topicSuffix: "/events") }

    /// Waits until `condition` holds for everything received so far.
    @discardableResult
    public func wait(timeout: Double = 20, description: String = "messages",
                     until condition: @escaping @Sendable ([MQTTMessage]) -> Bool) async throws -> [MQTTMessage] {
        try await wait(timeout: timeout, description: description, leafCount: nil, until: condition)
    }

    private func wait(timeout: Double, description: String, leafCount: (leaf: Substring, count: Int)?,
                      until condition: @escaping @Sendable ([MQTTMessage]) -> Bool) async throws -> [MQTTMessage] {
        let id = state.withLock { s in defer { s.nextID += 1 }; return s.nextID }
        let timer = DispatchWorkItem { [weak self] in
            guard let self else { return }
            let waiter = self.state.withLock { $0.waiters.removeValue(forKey: id) }
            let count = self.state.withLock { $0.messages.count }
            waiter?.continuation.resume(throwing: TestSupportError("timed out after \(timeout) s waiting for \(description) (\(count) messages received)"))
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + timeout, execute: timer)
        defer { timer.cancel() }
        return try await withCheckedThrowingContinuation { continuation in
            let satisfied = state.withLock { s -> [MQTTMessage]? in
                if condition(s.messages) { return s.messages }
                s.waiters[id] = Waiter(leafCount: leafCount, condition: condition, continuation: continuation)
                return nil
            }
            if let satisfied { continuation.resume(returning: satisfied) }
        }
    }

    /// Waits until at least `count` messages arrived on topics ending with
    /// `suffix` (one topic level, such as "/raw"), counted as they arrive.
    @discardableResult
    public func wait(count: Int, topicSuffix suffix: String, timeout: Double = 20) async throws -> [MQTTMessage] {
        let leaf = Substring(suffix.split(separator: "/").last ?? Substring(suffix))
        return try await wait(timeout: timeout, description: "\(count) on *\(suffix)", leafCount: (leaf, count)) { all in
            all.lazy.filter { $0.topic.hasSuffix(suffix) }.count >= count
        }.filter { $0.topic.hasSuffix(suffix) }
    }

    public func close() async { await client.disconnect(timeout: .seconds(2)) }
}

/// A client for publishing and commands in tests.
public enum TestClient {
    public static func connect(port: Int32, protocolVersion: MQTTOptions.ProtocolVersion = .v5) async throws -> MQTTClient {
        let client = try MQTTClient(MQTTOptions(port: port, clientID: "test-\(UUID().uuidString.prefix(8))",
                                                cleanStart: true, protocolVersion: protocolVersion))
        try await client.connect()
        return client
    }

    /// Sends a command with a v5 response topic and returns the decoded reply.
    public static func command(_ client: MQTTClient, topics: Topics = Topics(), device: String, _ name: String,
                               args: JSONValue? = nil, timeout: Double = 10) async throws -> CommandReply {
        let responseTopic = "\(topics.prefix)/_ctl/\(client.options.clientID)/reply"
        try await client.subscribe([responseTopic])
        let request = CommandRequest(id: .string(UUID().uuidString), args: args)
        let reply = try await client.request(
            MQTTMessage(topic: "\(topics.prefix)/\(device)/cmd/\(name)", payload: Array(JSONCoding.encode(request))),
            responseTopic: responseTopic, timeout: .milliseconds(Int64(timeout * 1000)))
        return try JSONCoding.decoder.decode(CommandReply.self, from: Data(reply.payload))
    }
}
