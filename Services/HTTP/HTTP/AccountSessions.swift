import Bus
import Foundation
import HTTPCore
import Model
import Runtime
import Synchronization
import TrackerLog

/// Where tracker-http logs in as the requesting account: the broker decides
/// who it is (its password file) and what it may do (its ACL), exactly as
/// for the account's own MQTT clients. Neither listener names the connection
/// after its account, so the account's own MQTT connection (named after it on
/// the devices' listener) is never taken over; every connection here is
/// `tracker-http~{login}~{random}`, a client id no account's connection has.
struct BrokerGate: Sendable {
    var host: String
    /// The listener for device and map-page accounts (the broker's password file).
    var gatePort: Int32
    /// The operators' listener (their own password file).
    var operatorPort: Int32
}

/// One account's connection, shared by its requests until it falls idle.
final class AccountSession: Sendable {
    let login: String
    let client: MQTTClient
    /// Replies come here: every account may read `tracker/_map/{itself}/…` (the ACL's pattern).
    let replyTopic: String
    let topics: Topics
    let logger: Logger
    private let state: Mutex<State>

    struct State {
        var lastUsedMs: Int64
        var live: [String: [UInt8]] = [:]
        /// Where reading the track service's frames (`getLive`) stands; once read, the subscription keeps them current.
        var liveLoad = LiveLoad.notStarted
        var friends: [String: [UInt8]] = [:]
        /// The filters subscribed so far (each once per session).
        var subscribed: Set<String> = []
        /// Open event streams and the topic filter each asked for.
        var streams: [Int: (filter: String, queue: EventQueue)] = [:]
        var nextStream = 0
        /// The newest events this session received, numbered in arrival order: a stream that
        /// reconnects with `Last-Event-ID` gets what it missed while the session stays open.
        var recent: [RecentEvent] = []
        var nextEventID = 1
    }

    /// One read of the fleet's frames at a time, shared by the requests that wait for it.
    enum LiveLoad {
        case notStarted
        case loading(Task<Void, any Error>)
        case loaded
        /// Not asked again for `liveRetryMs`: a track service that is down costs one wait, not one a request.
        case failed(atMs: Int64)
    }

    static let liveRetryMs: Int64 = 30_000

    init(login: String, client: MQTTClient, topics: Topics, nowMs: Int64, logger: Logger) {
        self.login = login; self.client = client; self.topics = topics; self.logger = logger
        replyTopic = "\(topics.prefix)/_map/\(login)/\(client.options.clientID.split(separator: "~").last ?? "http")/reply"
        state = Mutex(State(lastUsedMs: nowMs))
    }

    func touch(_ nowMs: Int64) { state.withLock { $0.lastUsedMs = nowMs } }

    /// Idle since when; nil while an event stream is open.
    var idleSinceMs: Int64? { state.withLock { $0.streams.isEmpty ? $0.lastUsedMs : nil } }

    /// Everything the broker delivers to this account's connection (replies go to `request` first).
    func received(_ message: MQTTMessage) {
        let levels = message.topic.split(separator: "/", omittingEmptySubsequences: false)
        if levels.count == 3, levels[0] == Substring(topics.prefix), levels[2] == "live" {
            // Empty: the track service cleared a retained frame (retainLiveFrames off); the next comes unretained.
            state.withLock { $0.live[String(levels[1])] = message.payload.isEmpty ? $0.live[String(levels[1])] : message.payload }
        } else if levels.first == Substring(topics.ownTracksPrefix), levels.count >= 3, levels[1] == Substring(Topics.ownTracksFriendsUser) {
            state.withLock { $0.friends[message.topic] = message.payload }
        } else if levels.count == 3, levels[2] == "events" {
            let (event, streams) = state.withLock { s -> (RecentEvent, [(filter: String, queue: EventQueue)]) in
                let event = RecentEvent(id: s.nextEventID, topic: message.topic, frame: EventFrame.make(id: s.nextEventID, payload: message.payload))
                s.nextEventID += 1
                s.recent.append(event)
                if s.recent.count > Self.recentCapacity { s.recent.removeFirst(s.recent.count - Self.recentCapacity) }
                return (event, Array(s.streams.values))
            }
            for stream in streams where Self.matches(stream.filter, event.topic) { stream.queue.offer(event.frame) }
        }
    }

    // MARK: Reads and writes as the account

    /// A command to a service, as the account: 403 if the ACL does not let it send it.
    func command(_ device: DeviceID, _ name: String, args: [String: JSONValue], timeout: Duration) async throws -> CommandReply {
        let request = CommandRequest(id: .string(UUID().uuidString.lowercased()), args: .object(args))
        do {
            let reply = try await client.request(MQTTMessage(topic: topics.command(device, name), payload: JSONCoding.bytes(request)),
                                                 responseTopic: replyTopic, timeout: timeout)
            return try JSONCoding.decoder.decode(CommandReply.self, from: Data(reply.payload))
        } catch MQTTError.publishRefused {
            throw HTTPError.forbidden("the broker's ACL does not let '\(login)' send \(name) for \(device)")
        } catch MQTTError.timedOut {
            throw HTTPError(504, .timeout, "no service answered \(name) for \(device) within \(timeout)")
        } catch let error as DecodingError {
            throw HTTPError(502, .internal, "\(name): the reply was not a command reply (\(DecodingErrorText.describe(error)))")
        }
    }

    /// `publish` for a thread that may block (a libmicrohttpd connection's
    /// own): no task, no hop to the Swift pool, the wait a semaphore's.
    func publishBlocking(_ message: MQTTMessage, what: String, timeout: Duration = .seconds(10)) throws {
        let done = DispatchSemaphore(value: 0)
        let outcome = Mutex<Result<Void, MQTTError>?>(nil)
        try client.publish(message) { result in
            outcome.withLock { $0 = result }
            done.signal()
        }
        guard done.wait(timeout: .now() + .milliseconds(Int(timeout.milliseconds))) == .success,
              let result = outcome.withLock({ $0 }) else {
            throw refusal(.timedOut(operation: "publish"), what: what)
        }
        if case .failure(let error) = result { throw refusal(error, what: what) }
    }

    /// Publishes as the account and waits for the broker: 403 if the ACL refuses the topic.
    func publish(_ message: MQTTMessage, what: String) async throws {
        do {
            try await client.publishAndWait(message, timeout: .seconds(10))
        } catch let error as MQTTError {
            throw refusal(error, what: what)
        }
    }

    /// What a publish that failed answers: 403 for the ACL's refusal, 503 for the rest.
    private func refusal(_ error: MQTTError, what: String) -> HTTPError {
        switch error {
        case .publishRefused: HTTPError.forbidden("the broker's ACL does not let '\(login)' publish \(what)")
        case .timedOut: HTTPError(503, .busy, "the broker did not acknowledge \(what) in time")
        default: HTTPError(503, .busy, "\(what): \(error)")
        }
    }

    /// Subscribes to `filters` once per session. With `settled`, a second
    /// SUBSCRIBE follows: its SUBACK comes after every retained message of
    /// the first (the broker answers a client's packets in order), so all
    /// have arrived when this returns.
    private func subscribeOnce(_ filters: [String], qos: QoS = .atLeastOnce, settled: Bool) async throws {
        guard !state.withLock({ filters.allSatisfy($0.subscribed.contains) }) else { return }
        try await client.subscribe(filters, qos: qos)
        if settled { try await client.subscribe(filters, qos: qos) }
        state.withLock { $0.subscribed.formUnion(filters) }
    }

    /// The live frames the account may read, by device: the retained ones,
    /// the track service's (read once a session: a fleet's frames need not
    /// be retained), and whatever came since. Should the track service not
    /// answer, what the subscription brought stands, and the log says so.
    func liveFrames(timeout: Duration, nowMs: Int64) async throws -> [String: [UInt8]] {
        try await subscribeOnce(["\(topics.prefix)/+/live"], qos: .atMostOnce, settled: true)
        let load = state.withLock { s -> Task<Void, any Error>? in
            switch s.liveLoad {
            case .loaded: return nil
            case .loading(let task): return task
            case .failed(let atMs) where nowMs - atMs < Self.liveRetryMs: return nil
            case .notStarted, .failed:
                let task = Task { try await self.loadLiveFrames(timeout: timeout) }
                s.liveLoad = .loading(task)
                return task
            }
        }
        if let load {
            do {
                try await load.value
                state.withLock { $0.liveLoad = .loaded }
            } catch {
                let first = state.withLock { s -> Bool in
                    guard case .loading = s.liveLoad else { return false }
                    s.liveLoad = .failed(atMs: nowMs)
                    return true
                }
                if first {
                    logger.warning("the track service's live frames (getLive) could not be read; serving what the subscription brought",
                                   ["login": login, "error": "\(error)", "retryInSec": "\(Self.liveRetryMs / 1000)"])
                }
            }
        }
        return state.withLock { $0.live }
    }

    /// `getLive` for the fleet, page by page, or, for an account that may
    /// not ask the fleet's, for the device its login names (a device
    /// account; a per-device OwnTracks login's device has another id, and
    /// gets its frame from the topic).
    private func loadLiveFrames(timeout: Duration) async throws {
        var after: String?
        repeat {
            let reply: CommandReply
            do {
                reply = try await command(.fleet, "getLive", args: after.map { ["after": .string($0)] } ?? [:], timeout: timeout)
            } catch let error as HTTPError where error.code == .forbidden {
                guard let own = DeviceID(login), !own.isReserved else { return }
                do {
                    let mine = try await command(own, "getLive", args: [:], timeout: timeout)
                    if mine.ok, let frame = mine.result { offer(frame) }
                } catch let error as HTTPError where error.code == .forbidden {}
                return
            }
            guard reply.ok else { throw HTTPError(failed: reply, "getLive") }
            for frame in reply.result?["frames"]?.arrayValue ?? [] { offer(frame) }
            let next = reply.result?["next"]?.stringValue
            // A cursor that does not move on would ask forever.
            if let next, let previous = after, next <= previous {
                throw HTTPError(502, .internal, "getLive: the page after '\(previous)' ends at '\(next)'")
            }
            after = next
        } while after != nil
    }

    /// A frame from the track service, unless the topic brought a newer one already.
    private func offer(_ frame: JSONValue) {
        struct Stamp: Decodable { var timeMs: Int64 }
        guard let device = frame["device"]?.stringValue, let timeMs = frame["timeMs"]?.int64Value else { return }
        state.withLock { s in
            if let known = s.live[device], let stamp = try? JSONCoding.decoder.decode(Stamp.self, from: Data(known)), stamp.timeMs >= timeMs { return }
            s.live[device] = JSONCoding.bytes(frame)
        }
    }

    /// The friends the account may read (`owntracks/_tracker/…`, its teammates), as OwnTracks HTTP mode answers.
    func friends(except own: DeviceID?) async throws -> [[UInt8]] {
        let friendsTopic = "\(topics.ownTracksPrefix)/\(Topics.ownTracksFriendsUser)/+"
        try await subscribeOnce([friendsTopic, friendsTopic + "/info"], settled: true)
        let ownTopic = own.map { topics.friendLocation($0) }
        return state.withLock { s in
            s.friends.keys.sorted().filter { $0 != ownTopic && $0 != ownTopic.map { $0 + "/info" } }.compactMap { topic in
                // The apps key a friend by its topic: it goes into each object, as Recorder does.
                guard var object = (try? JSONSerialization.jsonObject(with: Data(s.friends[topic]!))) as? [String: Any] else { return nil }
                object["topic"] = topic.hasSuffix("/info") ? String(topic.dropLast(5)) : topic
                return (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])).map { Array($0) }
            }
        }
    }

    static let recentCapacity = 1_000

    /// An event of `filter`'s (`tracker/+/events` or one device's).
    static func matches(_ filter: String, _ topic: String) -> Bool {
        filter == topic || (filter.hasSuffix("/+/events") && topic.hasSuffix("/events"))
    }

    /// An event stream of what the account may read on `filter`; after
    /// `lastEventID` (a reconnect), first what this session kept since then.
    func openEvents(_ filter: String, queue: EventQueue, after lastEventID: Int?) async throws -> Int {
        let id = state.withLock { s -> Int in
            defer { s.nextStream += 1 }
            if let lastEventID {
                if let oldest = s.recent.first?.id, lastEventID + 1 >= oldest, lastEventID < s.nextEventID {
                    for event in s.recent where event.id > lastEventID && Self.matches(filter, event.topic) { queue.offer(event.frame) }
                } else {
                    // Not this session's numbering (tracker-http restarted, or the session closed), or older than it keeps.
                    queue.offer(EventFrame.notResumed(lastEventID))
                }
            }
            s.streams[s.nextStream] = (filter, queue)
            return s.nextStream
        }
        try await subscribeOnce([filter], qos: .atMostOnce, settled: false)
        return id
    }

    func closeEvents(_ id: Int, nowMs: Int64) {
        state.withLock { s in
            s.streams[id] = nil
            s.lastUsedMs = nowMs
        }
    }

    func closeAllStreams() {
        for stream in state.withLock({ Array($0.streams.values) }) { stream.queue.close() }
    }
}

/// The accounts' sessions: one per login and password, opened on first use,
/// closed when idle; at most `max`.
actor AccountSessions {
    let gate: BrokerGate
    let topics: Topics
    let max: Int
    let idleMs: Int64
    let clock: any WallClock
    let logger: Logger
    private var sessions: [Key: Task<AccountSession, any Error>] = [:]
    /// The open sessions, for a blocking thread to find without a hop onto the actor.
    private nonisolated let open = Mutex<[Key: AccountSession]>([:])

    /// The account's session when it is open and connected; nil: ask `session`.
    nonisolated func cached(_ credentials: Credentials) -> AccountSession? {
        guard let session = open.withLock({ $0[Key(login: credentials.username, password: credentials.password)] }),
              session.client.isConnected else { return nil }
        session.touch(clock.nowMs())
        return session
    }

    struct Key: Hashable { var login: String; var password: String }

    init(gate: BrokerGate, topics: Topics, max: Int, idleMs: Int64, clock: any WallClock, logger: Logger) {
        self.gate = gate; self.topics = topics; self.max = max; self.idleMs = idleMs; self.clock = clock; self.logger = logger
    }

    var count: Int { sessions.count }

    /// The account's session, logged in if need be: 401 when the broker refuses the login on both listeners.
    func session(_ credentials: Credentials) async throws -> AccountSession {
        let login = credentials.username
        guard !login.contains(where: { "/+#".contains($0) }), login.utf8.count <= 256 else { throw HTTPError.unauthorized }
        let key = Key(login: login, password: credentials.password)
        if let task = sessions[key] {
            let session = try await task.value
            // The broker closes a login removed from its password file (or any, when it restarts): log in again.
            if session.client.isConnected {
                session.touch(clock.nowMs())
                return session
            }
            sessions[key] = nil
            open.withLock { _ = $0.removeValue(forKey: key) }
            session.closeAllStreams()
            await session.client.disconnect(timeout: .seconds(1))
        }
        guard sessions.count < max else { throw HTTPError(503, .busy, "tracker-http holds \(max) accounts' sessions (maxSessions); try again shortly") }
        let task = Task { [gate, topics, clock, logger] in
            try await Self.open(credentials, gate: gate, topics: topics, nowMs: clock.nowMs(), logger: logger)
        }
        sessions[key] = task
        do {
            let session = try await task.value
            open.withLock { $0[key] = session }
            return session
        } catch let unreachable as Unreachable {
            sessions[key] = nil
            // Said once in ten seconds, not once a request.
            if clock.nowMs() - lastUnreachableLogMs >= 10_000 {
                lastUnreachableLogMs = clock.nowMs()
                logger.warning("the broker is not reachable for an account's session", ["port": "\(unreachable.port)", "error": unreachable.error])
            }
            throw HTTPError(503, .busy, "the broker is not reachable; try again shortly")
        } catch {
            sessions[key] = nil
            throw error
        }
    }

    private var lastUnreachableLogMs: Int64 = .min / 2
    struct Unreachable: Error { var port: Int32; var error: String }

    private static func open(_ credentials: Credentials, gate: BrokerGate, topics: Topics, nowMs: Int64, logger: Logger) async throws -> AccountSession {
        let suffix = String(UInt64.random(in: 0...UInt64.max), radix: 36)
        var refused = false
        for port in gate.gatePort == gate.operatorPort ? [gate.gatePort] : [gate.gatePort, gate.operatorPort] {
            let client = try MQTTClient(MQTTOptions(host: gate.host, port: port, clientID: "tracker-http~\(credentials.username)~\(suffix)",
                                                    cleanStart: true, sessionExpirySec: 0, username: credentials.username,
                                                    password: credentials.password, protocolVersion: .v5))
            do {
                try await client.connect(timeout: .seconds(5))
            } catch MQTTError.refused(let code, _) where [0x86, 0x87, 0x8C, 4, 5].contains(code) {
                refused = true
                await client.disconnect(timeout: .seconds(1))
                continue
            } catch {
                await client.disconnect(timeout: .seconds(1))
                throw Unreachable(port: port, error: "\(error)")
            }
            let session = AccountSession(login: credentials.username, client: client, topics: topics, nowMs: nowMs, logger: logger)
            client.setHandler { message in session.received(message) }
            try await client.subscribe([session.replyTopic])
            return session
        }
        throw refused ? HTTPError.unauthorized : HTTPError(503, .busy, "the broker is not reachable")
    }

    /// Closes the sessions idle for `idleMs` (an open event stream keeps one).
    func closeIdle() async {
        let now = clock.nowMs()
        for (key, task) in sessions {
            guard let session = try? await task.value else { continue }
            if let since = session.idleSinceMs, now - since >= idleMs {
                // Out of the blocking threads' reach first, then closed.
                open.withLock { _ = $0.removeValue(forKey: key) }
                sessions[key] = nil
                await session.client.disconnect(timeout: .seconds(2))
            }
        }
    }

    func closeAll() async {
        for task in sessions.values {
            guard let session = try? await task.value else { continue }
            session.closeAllStreams()
            await session.client.disconnect(timeout: .seconds(2))
        }
        sessions.removeAll()
        open.withLock { $0.removeAll() }
    }
}

/// Events waiting for one Server-Sent Events response; the connection's
/// thread blocks in `next` (libmicrohttpd gives each connection its own).
final class EventQueue: EventSource, @unchecked Sendable {
    private let condition = NSCondition()
    private var items: [[UInt8]] = []
    private var closed = false
    private let keepAlive: TimeInterval
    /// Bounded: a reader too slow for the fleet's events loses the oldest, and is told.
    private let capacity = 10_000
    private var dropped = 0
    var onClose: (@Sendable () -> Void)?

    init(keepAlive: TimeInterval = 15) { self.keepAlive = keepAlive }

    func offer(_ frame: [UInt8]) {
        condition.lock()
        defer { condition.unlock() }
        guard !closed else { return }
        if items.count >= capacity { items.removeFirst(); dropped += 1 }
        items.append(frame)
        condition.signal()
    }

    func next() -> [UInt8]? {
        condition.lock()
        defer { condition.unlock() }
        while items.isEmpty && !closed {
            // A comment now and then keeps proxies from closing a quiet stream.
            if !condition.wait(until: Date().addingTimeInterval(keepAlive)) { return Array(": keep-alive\n\n".utf8) }
        }
        if closed { return nil }
        var chunk = items.removeFirst()
        if dropped > 0 {
            chunk = Array("event: dropped\ndata: {\"count\":\(dropped)}\n\n".utf8) + chunk
            dropped = 0
        }
        return chunk
    }

    func close() {
        condition.lock()
        let first = !closed
        closed = true
        condition.broadcast()
        condition.unlock()
        if first { onClose?() }
    }

}

/// An event as this session numbered it.
struct RecentEvent: Sendable {
    var id: Int
    var topic: String
    var frame: [UInt8]
}

/// Server-Sent Events' framing.
enum EventFrame {
    /// `id: N`, `event: {type}`, `data: {the event, on one line}`.
    static func make(id: Int, payload: [UInt8]) -> [UInt8] {
        let type = (try? JSONCoding.decoder.decode(EventType.self, from: Data(payload)))?.type ?? "event"
        return Array("id: \(id)\nevent: \(type)\ndata: ".utf8) + payload.filter { $0 != 0x0A && $0 != 0x0D } + Array("\n\n".utf8)
    }

    /// A `Last-Event-ID` this session cannot continue from: what came in between is not here.
    static func notResumed(_ lastEventID: Int) -> [UInt8] {
        Array("event: notResumed\ndata: {\"lastEventID\":\(lastEventID),\"message\":\"the events after it are not kept here; read the history routes\"}\n\n".utf8)
    }

    private struct EventType: Decodable { var type: String }
}
