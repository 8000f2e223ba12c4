import Bus
import Foundation
import HTTPCore
import Model
import Runtime
import Synchronization
import TrackerLog

/// What each route does, as the requesting account (docs/http.md).
struct API: Sendable {
    let sessions: AccountSessions
    let throttle: Throttle
    let counters: HealthCounters
    let topics: Topics
    let clock: any WallClock
    let commandTimeout: Duration
    /// The services' health statuses, as tracker-http's own account reads them.
    let services: ServiceStatuses

    func handle(_ request: HTTPRequest) async -> HTTPResponse {
        let response: HTTPResponse
        do {
            response = try await respond(try APIRoute.match(request).get(), request)
        } catch let error as HTTPError {
            response = error.response
        } catch {
            response = HTTPError(500, .internal, "\(error)").response
        }
        return counted(response)
    }

    /// The hot path, on the connection's own thread with no task: a fix from
    /// an account whose broker connection is open. Nil: take `handle`.
    func handleBlocking(_ request: HTTPRequest) -> HTTPResponse? {
        guard case .success(.osmAnd) = APIRoute.match(request) else { return nil }
        let response: HTTPResponse
        do {
            let (device, credentials, parsed) = try osmAndTarget(request)
            guard let session = sessions.cached(credentials) else { return nil }
            if let refusal = throttled(request.clientAddress) { throw refusal }
            try session.publishBlocking(MQTTMessage(topic: topics.fixes(device), payload: Self.payload(parsed)), what: "fixes of \(device)")
            counters.count("fixesIn", Int64(parsed.fixes.count))
            response = .empty
        } catch let error as HTTPError {
            response = error.response
        } catch {
            return nil
        }
        return counted(response)
    }

    private func counted(_ response: HTTPResponse) -> HTTPResponse {
        counters.count("status\(response.status / 100)xx")
        // Health's figures, as every service's: requests handled, and those refused for what they said or who sent them.
        counters.processed()
        if response.status >= 400 { counters.error() }
        return response
    }

    private func respond(_ route: APIRoute, _ request: HTTPRequest) async throws -> HTTPResponse {
        switch route {
        case .health:
            return .json(200, HealthBody(services: services.snapshot()))
        case .osmAnd:
            return try await osmAnd(request)
        case .ownTracksPublish:
            return try await ownTracks(request)
        case .devices:
            let frames = try await session(request).liveFrames(timeout: commandTimeout, nowMs: clock.nowMs())
            return .json(200, bytes: Array("[".utf8) + frames.keys.sorted().map { frames[$0]! }.joined(separator: Array(",".utf8)) + Array("]".utf8))
        case .device(let device):
            let session = try await session(request)
            guard let frame = try await session.liveFrames(timeout: commandTimeout, nowMs: clock.nowMs())[device.rawValue] else {
                throw HTTPError.notFound("no live frame of \(device) that '\(session.login)' may read: an unknown device, one without points yet, or another account's")
            }
            return .json(200, bytes: frame)
        case .query(let device, let query, let args):
            let reply = try await session(request).command(device, query.command, args: args, timeout: commandTimeout)
            var response = try Self.answer(reply, query.command)
            if let next = reply.nextOffset { response.headers.append(("X-Next-Offset", "\(next)")) }
            return response
        case .track(let device, let session, let format):
            let reply = try await self.session(request).command(device, format.command, args: ["sessionID": .string(session)], timeout: commandTimeout)
            // The exports' results are the document as text: sent as it is, under its own type.
            if reply.ok, case .string(let text)? = reply.result { return .text(200, contentType: format.contentType, text) }
            return try Self.answer(reply, format.command)
        case .events(let device):
            let session = try await session(request)
            let queue = EventQueue()
            let lastEventID = request.header("last-event-id").flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }
            let id = try await session.openEvents(device.map { topics.events($0) } ?? topics.allEvents, queue: queue, after: lastEventID)
            let clock = self.clock
            queue.onClose = { session.closeEvents(id, nowMs: clock.nowMs()) }
            return HTTPResponse(status: 200, headers: [("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache")],
                                body: [], stream: queue)
        }
    }

    /// A command's reply as HTTP: its result, or its failure's status and `{code, message}`.
    static func answer(_ reply: CommandReply, _ name: String) throws -> HTTPResponse {
        guard reply.ok else { throw HTTPError(failed: reply, name) }
        return .json(200, bytes: JSONCoding.bytes(reply.result ?? .null))
    }

    // MARK: In

    /// OsmAnd (Traccar Client): one fix, or the Flutter app's list, on `tracker/{id}/fixes` as the account.
    private func osmAnd(_ request: HTTPRequest) async throws -> HTTPResponse {
        let (device, credentials, parsed) = try osmAndTarget(request)
        let session = try await session(credentials, from: request)
        try await session.publish(MQTTMessage(topic: topics.fixes(device), payload: Self.payload(parsed)), what: "fixes of \(device)")
        counters.count("fixesIn", Int64(parsed.fixes.count))
        return .empty
    }

    /// Whose fixes, sent as whom: HTTP Basic and a device id, or an ingest token alone.
    private func osmAndTarget(_ request: HTTPRequest) throws -> (DeviceID, Credentials, OsmAndRequest) {
        let parsed = try OsmAndRequest.parse(request, nowMs: clock.nowMs()).get()
        if let basic = Credentials.basic(request.header("authorization")) {
            guard let id = DeviceID(parsed.id) else { throw HTTPError.badInput("id: '\(parsed.id.prefix(80))' is not a device id") }
            return (id, basic, parsed)
        }
        if let token = IngestToken.parse(parsed.id), case .ingestToken(let id, _) = token { return (id, token, parsed) }
        // A plain device name is no credential: anyone could send it.
        throw HTTPError.unauthorized
    }

    /// One fix as the contract's object, several as its array.
    private static func payload(_ request: OsmAndRequest) -> [UInt8] {
        request.fixes.count == 1 ? JSONCoding.bytes(request.fixes[0]) : JSONCoding.bytes(request.fixes)
    }

    /// OwnTracks HTTP mode: the message takes the path it takes over MQTT, and the answer is the app's friends.
    private func ownTracks(_ request: HTTPRequest) async throws -> HTTPResponse {
        guard let credentials = Credentials.basic(request.header("authorization")) else { throw HTTPError.unauthorized }
        let user = request.header("x-limit-u") ?? credentials.username
        guard let device = request.header("x-limit-d"), !device.isEmpty else {
            throw HTTPError.badInput("X-Limit-D: required (the app's device name; set a Device ID in the app)")
        }
        guard !user.isEmpty, !(user + device).contains(where: { "/+#".contains($0) }) else {
            throw HTTPError.badInput("X-Limit-U, X-Limit-D: names without / + #")
        }
        let session = try await session(credentials, from: request)
        if !request.body.isEmpty {
            guard let object = try? JSONSerialization.jsonObject(with: Data(request.body)) as? [String: Any] else {
                throw HTTPError.badInput("body: not a JSON object")
            }
            let type = object["_type"] as? String ?? ""
            // As the apps publish over MQTT: a location retained on the device's topic, the rest on their sub-topics.
            let sub = ["transition": "/event", "waypoint": "/waypoint", "waypoints": "/waypoints", "status": "/status", "card": "/info"][type] ?? ""
            let topic = "\(topics.ownTracksPrefix)/\(user)/\(device)\(sub)"
            try await session.publish(MQTTMessage(topic: topic, payload: request.body, retain: type == "location"), what: topic)
            counters.count("ownTracksIn")
        }
        let friends = try await session.friends(except: DeviceID.ownTracks(user: user, device: device))
        return .json(200, bytes: Array("[".utf8) + friends.joined(separator: Array(",".utf8)) + Array("]".utf8))
    }

    // MARK: The gate

    private func session(_ request: HTTPRequest) async throws -> AccountSession {
        guard let credentials = Credentials.basic(request.header("authorization")) else { throw HTTPError.unauthorized }
        return try await session(credentials, from: request)
    }

    /// The account's session; wrong credentials count against the client's address, never against the account.
    private func throttled(_ address: String) -> HTTPError? {
        guard let waitMs = throttle.withLock({ $0.check(address, nowMs: clock.nowMs()) }) else { return nil }
        counters.count("throttled")
        return HTTPError(429, .limitReached, "too many failed logins from \(address); try again in \(max(1, waitMs / 1000)) s")
    }

    private func session(_ credentials: Credentials, from request: HTTPRequest) async throws -> AccountSession {
        let address = request.clientAddress
        if let refusal = throttled(address) { throw refusal }
        do {
            let session = try await sessions.session(credentials)
            throttle.withLock { $0.succeeded(address) }
            return session
        } catch let error as HTTPError where error.status == 401 {
            throttle.withLock { $0.failed(address, nowMs: clock.nowMs()) }
            counters.count("loginsRefused")
            throw error
        }
    }
}

/// `/health`'s body: tracker-http is up, and the services' statuses by name.
struct HealthBody: Encodable {
    var service = "http"
    var status = "online"
    var services: [String: String]
}

/// The login throttle, shared by the connections' requests.
final class Throttle: Sendable {
    private let state: Mutex<LoginThrottle>
    init(_ throttle: LoginThrottle) { state = Mutex(throttle) }
    func withLock<T>(_ body: (inout LoginThrottle) -> T) -> T { state.withLock { body(&$0) } }
}

/// The services' newest health status (`online`/`offline`), from `tracker/_health/+`.
final class ServiceStatuses: Sendable {
    private let statuses = Mutex<[String: String]>([:])
    func received(_ message: MQTTMessage) {
        guard let health = try? JSONCoding.decoder.decode(Health.self, from: Data(message.payload)) else { return }
        statuses.withLock { $0[health.service] = health.status.rawValue }
    }
    func snapshot() -> [String: String] { statuses.withLock { $0 } }
}

extension HTTPError {
    /// A command's failed reply as HTTP: its code's status and `{code, message}`.
    init(failed reply: CommandReply, _ name: String) {
        let code = reply.code.flatMap(ErrorCode.init(rawValue:)) ?? .internal
        self.init(HTTPError.status(of: code), code, reply.message ?? "\(name) failed")
    }
}
