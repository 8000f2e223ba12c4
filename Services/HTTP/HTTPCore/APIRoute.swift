import Foundation
import Model

/// Every route tracker-http answers (docs/openapi.json lists the same).
public enum APIRoute: Equatable, Sendable {
    /// `GET|POST /`: OsmAnd (Traccar Client).
    case osmAnd
    /// `POST /pub`: OwnTracks in HTTP mode.
    case ownTracksPublish
    case health
    /// `GET /api/v1/devices`: every device whose live frame the account may read.
    case devices
    /// `GET /api/v1/devices/{d}`: its live frame.
    case device(DeviceID)
    /// `GET /api/v1/devices/{d}/{query}`: a command's answer.
    case query(DeviceID, DeviceQuery, args: [String: JSONValue])
    /// `GET /api/v1/devices/{d}/sessions/{s}/track[.json|.geojson|.gpx]`.
    case track(DeviceID, session: String, format: TrackFormat)
    /// `GET /api/v1/events`: Server-Sent Events (`?device=` for one device's).
    case events(DeviceID?)

    /// The route for a request, or why there is none (404 unknown, 405 wrong method, 400 a bad id or query).
    public static func match(_ request: HTTPRequest) -> Result<APIRoute, HTTPError> {
        let method = request.method.uppercased()
        let segments = request.path.split(separator: "/", omittingEmptySubsequences: false).dropFirst().map(String.init)
        // Path traversal and empty segments name nothing.
        if segments.contains(where: { $0 == ".." || $0 == "." }) { return .failure(.notFound("no route \(request.path.prefix(120))")) }
        func get(_ route: APIRoute, allowing: Set<String> = []) -> Result<APIRoute, HTTPError> {
            guard method == "GET" || method == "HEAD" else { return .failure(HTTPError(405, .badInput, "\(request.path.prefix(120)): use GET")) }
            if let unknown = request.query.keys.sorted().first(where: { !allowing.contains($0) }) {
                return .failure(.badInput("unknown query parameter '\(unknown.prefix(40))'; this route takes \(allowing.isEmpty ? "none" : allowing.sorted().joined(separator: ", "))"))
            }
            return .success(route)
        }
        switch segments.joined(separator: "/") {
        case "":
            guard method == "GET" || method == "POST" else { return .failure(HTTPError(405, .badInput, "/: OsmAnd takes GET or POST")) }
            return .success(.osmAnd)
        case "pub":
            guard method == "POST" else { return .failure(HTTPError(405, .badInput, "/pub: use POST")) }
            return .success(.ownTracksPublish)
        case "health": return get(.health)
        case "api/v1/devices": return get(.devices)
        case "api/v1/events":
            return device(request.query["device"]).flatMap { get(.events($0), allowing: ["device"]) }
        default: break
        }
        guard segments.count >= 4, segments[0] == "api", segments[1] == "v1", segments[2] == "devices" else {
            return .failure(.notFound("no route \(request.path.prefix(120)); see docs/openapi.json"))
        }
        guard let id = DeviceID(segments[3]) else {
            return .failure(.badInput("device: '\(segments[3].prefix(80))' is not a device id (1–64 of A-Z a-z 0-9 . _ -)"))
        }
        let rest = Array(segments.dropFirst(4))
        if rest.isEmpty { return get(.device(id)) }
        if rest.count == 1, let query = DeviceQuery(rawValue: rest[0]) {
            return get(.query(id, query, args: [:]), allowing: query.parameters).flatMap { _ in
                query.arguments(request.query).map { .query(id, query, args: $0) }
            }
        }
        if rest.count == 3, rest[0] == "sessions", rest[2].hasPrefix("track") {
            guard let format = TrackFormat(fileName: rest[2], format: request.query["format"]) else {
                return .failure(.badInput("track: ask for track, track.json, track.geojson or track.gpx (or ?format=json|geojson|gpx)"))
            }
            guard !rest[1].isEmpty, rest[1].count <= 100 else { return .failure(.badInput("session: 1–100 characters")) }
            return get(.track(id, session: rest[1], format: format), allowing: ["format"])
        }
        return .failure(.notFound("no route \(request.path.prefix(120)); see docs/openapi.json"))
    }

    static func device(_ text: String?) -> Result<DeviceID?, HTTPError> {
        guard let text else { return .success(nil) }
        guard let id = DeviceID(text) else { return .failure(.badInput("device: '\(text.prefix(80))' is not a device id")) }
        return .success(id)
    }
}

/// A device's data the API serves from a service's command of the same name.
public enum DeviceQuery: String, CaseIterable, Sendable {
    case sessions, trips, stops, summary, geofences
    case geofenceEvents = "geofence-events"

    public var command: String {
        switch self {
        case .sessions: "getSessions"
        case .trips: "getTrips"
        case .stops: "getStops"
        case .summary: "getSummary"
        case .geofences: "getGeofences"
        case .geofenceEvents: "getGeofenceEvents"
        }
    }

    /// The query parameters it takes.
    var parameters: Set<String> {
        switch self {
        case .sessions: ["from", "to"]
        case .trips, .stops: ["from", "to", "limit", "offset"]
        case .summary: ["from", "to"]
        case .geofences: []
        case .geofenceEvents: ["geofenceID", "limit", "offset"]
        }
    }

    /// The command's arguments from the query: `from`/`to` as ISO 8601 or milliseconds since 1970.
    func arguments(_ query: [String: String]) -> Result<[String: JSONValue], HTTPError> {
        var args: [String: JSONValue] = [:]
        for (name, key) in [("from", "fromMs"), ("to", "toMs")] {
            guard let text = query[name] else { continue }
            if let ms = Int64(text) { args[key] = .number(Double(ms)); continue }
            guard let seconds = ISO8601.seconds(text) else {
                return .failure(.badInput("\(name): '\(text.prefix(40))' is neither milliseconds since 1970 nor an ISO 8601 time with a zone"))
            }
            args[key] = .number((seconds * 1000).rounded())
        }
        for name in ["limit", "offset"] {
            guard let text = query[name] else { continue }
            guard let n = Int(text) else { return .failure(.badInput("\(name): '\(text.prefix(40))' is not a whole number")) }
            args[name] = .number(Double(n))
        }
        if let fence = query["geofenceID"] { args["geofenceID"] = .string(fence) }
        if self == .summary, args["fromMs"] == nil || args["toMs"] == nil {
            return .failure(.badInput("summary: from and to are required"))
        }
        return .success(args)
    }
}

public enum TrackFormat: String, Sendable {
    case json, geojson, gpx

    init?(fileName: String, format: String?) {
        switch (fileName, format) {
        case ("track", nil), ("track.json", nil), ("track", "json"): self = .json
        case ("track.geojson", nil), ("track", "geojson"): self = .geojson
        case ("track.gpx", nil), ("track", "gpx"): self = .gpx
        default: return nil
        }
    }

    public var command: String {
        switch self {
        case .json: "buildTrack"
        case .geojson: "exportGeoJSON"
        case .gpx: "exportGPX"
        }
    }

    public var contentType: String {
        switch self {
        case .json: "application/json"
        case .geojson: "application/geo+json"
        case .gpx: "application/gpx+xml"
        }
    }
}
