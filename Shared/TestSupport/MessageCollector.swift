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
        /// Health messages, each decoded once as it arrives: waits on health
        /// look at the new one (or the newest per instance), not at every
        /// message again, which made a long run's waits quadratic.
        var healths: [Health] = []
        var newestHealth: [String: Health] = [:]
        var waiters: [Int: Waiter] = [:]
        var nextID = 0

        /// What a wait looks at: everything so far (when it starts), or the
        /// message that just came, with its health if it was one.
        enum Moment { case registering, arrived(Health?) }

        /// Whether `condition` holds at `moment`: nil if not, else the health
        /// that satisfied a `.health` condition (nil for the others).
        func holds(_ condition: Condition, at moment: Moment) -> Match? {
            switch (condition, moment) {
            case (.messages(let condition), _):
                return condition(messages) ? Match(health: nil) : nil
            case let (.suffixCount(suffix, count), .registering):
                // Counted exactly once; then by leaf as messages arrive.
                return messages.lazy.filter { $0.topic.hasSuffix(suffix) }.count >= count ? Match(health: nil) : nil
            case let (.suffixCount(suffix, count), .arrived):
                return countsByLeaf[Self.leaf(suffix), default: 0] >= count ? Match(health: nil) : nil
            case (.health(let condition), .registering):
                return healths.first(where: condition).map { Match(health: $0) }
            case let (.health(condition), .arrived(health)):
                return health.flatMap { condition($0) ? Match(health: $0) : nil }
            case (.newestHealth(let condition), .registering), (.newestHealth(let condition), .arrived(.some)):
                return condition(newestHealth) ? Match(health: nil) : nil
            case (.newestHealth, .arrived(.none)):
                return nil
            }
        }

        static func leaf(_ suffix: String) -> Substring { suffix.split(separator: "/").last ?? Substring(suffix) }
    }

    /// A condition met; for `.health`, the message that met it.
    private struct Match {
        var health: Health?
    }

    private enum Condition {
        case messages(@Sendable ([MQTTMessage]) -> Bool)
        /// At least this many on topics ending with the suffix.
        case suffixCount(String, Int)
        /// Any one health message received.
        case health(@Sendable (Health) -> Bool)
        /// The newest health of each instance (`Health.instance`).
        case newestHealth(@Sendable ([String: Health]) -> Bool)
    }

    /// What a satisfied wait saw.
    private struct Seen {
        var messages: [MQTTMessage]
        var newestHealth: [String: Health]
        var health: Health?
    }

    private struct Waiter {
        let condition: Condition
        let continuation: CheckedContinuation<Seen, any Error>
    }

    public init(port: Int32, filters: [String], clientID: String = "collector-\(UUID().uuidString.prefix(8))",
                username: String? = nil, password: String? = nil, persistentSession: Bool = false) async throws {
        client = try MQTTClient(MQTTOptions(port: port, clientID: clientID, cleanStart: !persistentSession,
                                            sessionExpirySec: persistentSession ? 600 : 0, username: username, password: password))
        client.setHandler { [weak self] message in
            guard let self else { return }
            // Health is published under `{root}/_health/…`, whatever the root.
            let health = message.topic.contains("/_health/") ? Health.decode(message) : nil
            let ready = self.state.withLock { s -> [(CheckedContinuation<Seen, any Error>, Seen)] in
                s.messages.append(message)
                if let leaf = message.topic.split(separator: "/").last { s.countsByLeaf[leaf, default: 0] += 1 }
                if let health {
                    s.healths.append(health)
                    if let instance = health.instance { s.newestHealth[instance] = health }
                }
                var ready: [(CheckedContinuation<Seen, any Error>, Seen)] = []
                for (id, waiter) in s.waiters {
                    guard let matched = s.holds(waiter.condition, at: .arrived(health)) else { continue }
                    s.waiters[id] = nil
                    ready.append((waiter.continuation, Seen(messages: s.messages, newestHealth: s.newestHealth, health: matched.health)))
                }
                return ready
            }
            ready.forEach { $0.0.resume(returning: $0.1) }
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
        try await wait(.messages(condition), timeout: timeout, description: description).messages
    }

    /// Waits until a health message received here satisfies `condition`;
    /// returns the first that does. Each message is decoded once.
    @discardableResult
    public func waitForHealth(timeout: Double = 20, description: String,
                              until condition: @escaping @Sendable (Health) -> Bool) async throws -> Health {
        try await wait(.health(condition), timeout: timeout, description: description).health!
    }

    /// Waits until the newest health of each instance (by `Health.instance`)
    /// satisfies `condition`, looked at as each health message arrives; returns it.
    @discardableResult
    public func waitForNewestHealth(timeout: Double = 20, description: String,
                                    until condition: @escaping @Sendable ([String: Health]) -> Bool) async throws -> [String: Health] {
        try await wait(.newestHealth(condition), timeout: timeout, description: description).newestHealth
    }

    /// The newest health of each instance received so far.
    public var newestHealth: [String: Health] { state.withLock { $0.newestHealth } }

    private func wait(_ condition: Condition, timeout: Double, description: String) async throws -> Seen {
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
            let satisfied = state.withLock { s -> Seen? in
                if let matched = s.holds(condition, at: .registering) {
                    return Seen(messages: s.messages, newestHealth: s.newestHealth, health: matched.health)
                }
                s.waiters[id] = Waiter(condition: condition, continuation: continuation)
                return nil
            }
            if let satisfied { continuation.resume(returning: satisfied) }
        }
    }

    /// Waits until at least `count` messages arrived on topics ending with
    /// `suffix` (one topic level, such as "/raw"), counted as they arrive.
    @discardableResult
    public func wait(count: Int, topicSuffix suffix: String, timeout: Double = 20) async throws -> [MQTTMessage] {
        try await wait(.suffixCount(suffix, count), timeout: timeout, description: "\(count) on *\(suffix)")
            .messages.filter { $0.topic.hasSuffix(suffix) }
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
            MQTTMessage(topic: "\(topics.prefix)/\(device)/cmd/\(name)", payload: JSONCoding.bytes(request)),
            responseTopic: responseTopic, timeout: .milliseconds(Int64(timeout * 1000)))
        return try JSONCoding.decoder.decode(CommandReply.self, from: Data(reply.payload))
    }

    /// A command asked again until its reply is `enough` or `deadline` has
    /// passed: the last reply, nil when none came. A request that times out
    /// is asked again: a service working through a backlog (after a restart)
    /// may answer later than one request waits.
    public static func ask(_ client: MQTTClient, device: String, _ name: String, args: JSONValue? = nil,
                           until deadline: ContinuousClock.Instant, enough: (CommandReply) -> Bool) async throws -> CommandReply? {
        var last: CommandReply?
        while ContinuousClock.now < deadline {
            do {
                last = try await command(client, device: device, name, args: args)
            } catch MQTTError.timedOut {
                continue
            }
            if let last, enough(last) { break }
        }
        return last
    }
}
