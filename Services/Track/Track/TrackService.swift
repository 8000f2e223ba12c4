import Bus
import FoundationEssentials
import Model
import Runtime
import Store
import TrackCore

struct TrackSettings {
    /// Points older than this (before the device's newest point) are deleted.
    var maxDaysToPersist: Double
    var maxPointsPerDevice: Int
    var maxPointsTotal: Int
    var gapAfterMs: Int64
    var gapMinDistanceM: Double
    /// An OSRM server of the operator's for snapping built tracks to roads (off by default).
    var roadSnap: RoadSnapper?
    var roadSnapTimeoutMs: Int
    var friends: FriendsPolicy
    /// Whether the live frames are retained by the broker. A large fleet
    /// turns it off: the broker writes every retained message to disk with
    /// each save (every second), and fixes wait meanwhile; viewers then take
    /// the fleet's frames from `getLive` and follow the topic.
    var retainLiveFrames: Bool

    init(_ reader: SettingsReader) throws {
        if let url = try reader.optionalString("roadSnapUrl") {
            guard let parsed = URL(string: url), ["http", "https"].contains(parsed.scheme?.lowercased() ?? ""), parsed.host != nil else {
                throw ConfigError("roadSnapUrl", "must be an http or https URL of an OSRM server, got '\(url.prefix(200))'")
            }
            roadSnap = RoadSnapper(baseURL: url, profile: try reader.choice("roadSnapProfile", default: "driving", among: ["driving", "car", "bike", "foot"]))
        } else {
            _ = try reader.optionalString("roadSnapProfile")
        }
        roadSnapTimeoutMs = try reader.int("roadSnapTimeoutMs", default: 5_000, in: 100...120_000)
        maxDaysToPersist = try reader.double("maxDaysToPersist", default: 30, in: 1...3_650)
        maxPointsPerDevice = try reader.int("maxPointsPerDevice", default: 2_000_000, in: 1_000...100_000_000)
        maxPointsTotal = try reader.int("maxPointsTotal", default: 100_000_000, in: 1_000...10_000_000_000)
        gapAfterMs = Int64(try reader.double("trackingGapAfterSec", default: 600, in: 1...86_400) * 1000)
        gapMinDistanceM = try reader.double("trackingGapMinDistanceM", default: 250, in: 0...1_000_000)
        friends = FriendsPolicy(rawValue: try reader.choice("friends", default: FriendsPolicy.ownTracks.rawValue,
                                                            among: FriendsPolicy.allCases.map(\.rawValue)))!
        retainLiveFrames = try reader.bool("retainLiveFrames", default: true)
    }
}

/// A device as the track service keeps it: its newest point, its recent
/// path and its session so far (for gaps and the live frame).
struct TrackRow: Codable, Equatable {
    var lastTimeMs: Int64?
    var lastLatitude: Double?
    var lastLongitude: Double?
    var last: TrackPoint?
    var motion: MotionState?
    /// The newest points, oldest first, at most `tailLength`.
    var tail: [Vertex] = []
    var session: LiveSession?
    var sessionStartOdometerM: Double?
    /// The device's retained frame was cleared (`retainLiveFrames` off);
    /// false again once a frame is retained.
    var retainedFrameCleared = false

    static let tailLength = 120

    private enum CodingKeys: String, CodingKey {
        case lastTimeMs, lastLatitude, lastLongitude, last, motion, tail, session, sessionStartOdometerM
    }
}

extension LiveSession: JSONWritable {
    public func write(to w: inout JSONWriter) {
        w.beginObject()
        w.field("distanceM", distanceM)
        w.field("durationSec", durationSec)
        w.field("id", id)
        w.field("maxSpeedMps", maxSpeedMps)
        w.field("points", Int64(points))
        w.field("startMs", startMs)
        w.endObject()
    }
}

/// Written for every point whose device has no newer one in the batch: with
/// a large fleet, every point. Through JSONEncoder (which sorts each
/// object's keys) it was a fifth of the track service's time.
extension LiveFrame: JSONWritable {
    public func write(to w: inout JSONWriter) {
        w.beginObject()
        w.field("accuracyM", accuracyM)
        w.field("device", device)
        w.field("headingDeg", headingDeg)
        w.field("latitude", latitude)
        w.field("longitude", longitude)
        w.field("motion", motion)
        w.field("session", session)
        w.field("speedMps", speedMps)
        w.key("tail")
        w.beginArray()
        for pair in tail {
            w.beginArray()
            for coordinate in pair { w.value(coordinate) }
            w.endArray()
        }
        w.endArray()
        w.field("timeMs", timeMs)
        w.endObject()
    }
}

/// Stores every accepted point once and builds tracks from them: the track
/// service's table for the host.
enum TrackService {
    static func definition(_ settings: TrackSettings) -> ServiceDefinition<TrackRow> {
        ServiceDefinition(name: "track", migrations: TrackStore.migrations, rows: .binary(fresh: { TrackRow() })) { db in
            let store = try TrackStore(db: db)
            let friends = Friends(policy: settings.friends)
            return Routes(
                inputs: [
                    .sequenced("points", decode: { try PointMessage(flat: $0) ?? JSONCoding.decoder.decode(PointMessage.self, from: Data($0)) }) { message, work in
                        try keep(message, work, store: store, settings: settings)
                        live(work, retained: settings.retainLiveFrames)
                        // The newest point only: a late one (a repair) does not move a friend back.
                        if work.row.last == message.point { friends.publish(message.point, measured: message.measured, work) }
                    },
                    .sequenced("motion", decode: { try MotionMessage(flat: $0) ?? JSONCoding.decoder.decode(MotionMessage.self, from: Data($0)) }) { message, work in
                        work.row.motion = message.state
                        live(work, retained: settings.retainLiveFrames)
                    },
                ],
                commands: [
                    .query("getPoints") { command, query in
                        let args = try command.arguments(PageArgs.self)
                        let page = try args.validated()
                        return try query.page("points", sessionID: args.sessionID, limit: page.limit, offset: page.offset)
                    },
                    .query("getCount") { command, query in
                        let args = try command.arguments(PageArgs.self)
                        return .value(try TrackStore.count(query.db, device: query.device, sessionID: args.sessionID))
                    },
                    .query("getOdometer") { command, query in
                        let args = try command.arguments(PageArgs.self)
                        return .value(try TrackStore.odometer(query.db, device: query.device, sessionID: args.sessionID))
                    },
                    .query("buildTrack") { command, query in .value(try Exports.track(command, query, settings)) },
                    .query("exportGeoJSON") { command, query in .value(JSONCoding.string(Exports.geoJSON(try Exports.track(command, query, settings)))) },
                    .query("exportPolylineJSON") { command, query in .value(try Exports.polylineJSON(try Exports.track(command, query, settings))) },
                    .query("exportGPX") { command, query in .value(Exports.gpx(try Exports.track(command, query, settings))) },
                    .query("getSummary") { command, query in .value(try Summary.of(command, query)) },
                    .query("getLive", scope: .any) { command, query in try LiveFrames.answer(command, query) }
                        .mergingFleetReplies(.inKeyOrder(items: "frames", key: "device")),
                ],
                retention: [LogRetention(store.points, keepPerDevice: settings.maxPointsPerDevice, maxTotal: settings.maxPointsTotal)])
        }
    }

    /// The row follows the newest point: the tail, and the session's running figures.
    private static func advance(_ row: inout TrackRow, to point: TrackPoint) {
        row.lastTimeMs = point.timeMs
        row.lastLatitude = point.latitude
        row.lastLongitude = point.longitude
        row.last = point
        row.tail.append(Vertex(latitude: point.latitude, longitude: point.longitude, timeMs: point.timeMs))
        if row.tail.count > TrackRow.tailLength { row.tail.removeFirst(row.tail.count - TrackRow.tailLength) }
        guard let id = point.sessionID else { row.session = nil; return }
        var session = row.session ?? LiveSession(id: "", startMs: 0, distanceM: 0, durationSec: 0, points: 0, maxSpeedMps: 0)
        if session.id != id {
            session = LiveSession(id: id, startMs: point.timeMs, distanceM: 0, durationSec: 0, points: 0, maxSpeedMps: 0)
            row.sessionStartOdometerM = point.odometerM
        }
        session.points += 1
        session.distanceM = max(0, point.odometerM - (row.sessionStartOdometerM ?? point.odometerM))
        session.durationSec = Double(point.timeMs - session.startMs) / 1000
        session.maxSpeedMps = max(session.maxSpeedMps, point.speedMps ?? 0)
        row.session = session
    }

    /// The live frame at QoS 0, retained unless the setting says not;
    /// only the newest of a batch is published.
    private static func live(_ work: Work<TrackRow>, retained: Bool) {
        let row = work.row, device = work.device, topic = work.topics.live(device)
        guard let newest = row.last else { return }
        if !retained, !row.retainedFrameCleared {
            // A frame retained before the setting changed would stay in every save of the broker's.
            work.publish(MQTTMessage(topic: topic, payload: [], qos: .atLeastOnce, retain: true))
            work.row.retainedFrameCleared = true
        } else if retained, row.retainedFrameCleared {
            work.row.retainedFrameCleared = false
        }
        // Made only for the batch's newest frame of the device.
        work.publishLatest(topic: topic) {
            MQTTMessage(topic: topic, payload: JSONCoding.bytes(LiveFrames.frame(device, row, newest: newest)), qos: .atMostOnce, retain: retained)
        }
    }

    private static func keep(_ message: PointMessage, _ work: Work<TrackRow>, store: TrackStore, settings: TrackSettings) throws {
        let point = message.point
        try work.append(to: store.points, seq: point.seq, sessionID: point.sessionID, timeMs: point.timeMs,
                        body: JSONCoding.bytes(StoredBody(StoredPoint(point: point, measured: message.measured))))
        // A silence of 10 minutes or more that resumes 250 m away or more: one gap, its straight line a lower bound.
        if let lastMs = work.row.lastTimeMs, let lat = work.row.lastLatitude, let lon = work.row.lastLongitude,
           point.timeMs - lastMs >= settings.gapAfterMs {
            let distance = Geodesy.distance(lat, lon, point.latitude, point.longitude)
            if distance >= settings.gapMinDistanceM {
                work.emit(.trackingGap(durationSec: Double(point.timeMs - lastMs) / 1000, distanceMeters: distance), timeMs: point.timeMs)
            }
        }
        if point.timeMs >= work.row.lastTimeMs ?? .min {
            advance(&work.row, to: point)
            // Retention in the points' own time: a replayed recording from last year is not purged on arrival.
            if point.seq % 256 == 0 { try store.trim(work.device, before: point.timeMs - Int64(settings.maxDaysToPersist * 86_400_000)) }
        }
        work.processed()
        work.lag(receivedMs: message.receivedMs, fixMs: point.timeMs)
    }
}

/// The track service's table: every stored point, by device and seq.
final class TrackStore {
    let points: DeviceLog
    private let db: Database

    static let migrations: [(name: String, sql: String)] = [
        ("1-track", DeviceLog.schema("points") + "\nCREATE INDEX points_by_session ON points(device, sessionID, timeMs);"),
        // The points become append-ordered (DeviceLog): a point goes to the table's end, not into its device's pages.
        ("2-append-ordered-points", DeviceLog.reshape("points") + "\nCREATE INDEX points_by_session ON points(device, sessionID, timeMs);"),
    ]

    init(db: Database) throws {
        self.db = db
        points = try DeviceLog(db: db, table: "points")
    }

    func trim(_ device: DeviceID, before timeMs: Int64) throws {
        try db.run("DELETE FROM points WHERE device = ? AND timeMs < ?", .text(device.rawValue), .integer(timeMs))
    }

    static func count(_ db: Database, device: DeviceID, sessionID: String?) throws -> Int {
        if let sessionID {
            return try db.first("SELECT count(*) FROM points WHERE device = ? AND sessionID = ?", [.text(device.rawValue), .text(sessionID)]) { $0.int(0) } ?? 0
        }
        return try db.first("SELECT count(*) FROM points WHERE device = ?", [.text(device.rawValue)]) { $0.int(0) } ?? 0
    }

    /// The filter's odometer: the device's total, or what a session added to it.
    static func odometer(_ db: Database, device: DeviceID, sessionID: String?) throws -> Double {
        func odometer(_ sql: String, _ bindings: [SQLValue]) throws -> Double? {
            try db.first(sql, bindings) { try JSONCoding.decoder.decode(TrackPoint.self, from: $0.data(0)).odometerM }
        }
        guard let sessionID else {
            return try odometer("SELECT body FROM points WHERE device = ? ORDER BY seq DESC LIMIT 1", [.text(device.rawValue)]) ?? 0
        }
        let bindings: [SQLValue] = [.text(device.rawValue), .text(sessionID)]
        guard let first = try odometer("SELECT body FROM points WHERE device = ? AND sessionID = ? ORDER BY timeMs LIMIT 1", bindings),
              let last = try odometer("SELECT body FROM points WHERE device = ? AND sessionID = ? ORDER BY timeMs DESC LIMIT 1", bindings)
        else { return 0 }
        return max(0, last - first)
    }

    /// A device's points within a period, oldest first.
    static func period(_ db: Database, device: DeviceID, fromMs: Int64, toMs: Int64) throws -> [StoredPoint] {
        try db.query("SELECT body FROM points WHERE device = ? AND timeMs >= ? AND timeMs <= ? ORDER BY timeMs",
                     [.text(device.rawValue), .integer(fromMs), .integer(toMs)]) { try StoredPoint.stored($0.data(0)) }
    }

    /// A session's points, oldest first.
    static func session(_ db: Database, device: DeviceID, sessionID: String) throws -> [StoredPoint] {
        try db.query("SELECT body FROM points WHERE device = ? AND sessionID = ? ORDER BY timeMs", [.text(device.rawValue), .text(sessionID)]) {
            try StoredPoint.stored($0.data(0))
        }
    }
}

extension StoredPoint {
    /// Stored as the TrackPoint's own fields plus `measured`: `getPoints` returns them as they are.
    static func stored(_ data: Data) throws -> StoredPoint {
        struct Measured: Decodable { var measured: MeasuredFix? }
        return StoredPoint(point: try JSONCoding.decoder.decode(TrackPoint.self, from: data),
                           measured: try JSONCoding.decoder.decode(Measured.self, from: data).measured)
    }
}

/// A stored point as one flat object: the TrackPoint's fields and `measured`
/// (so `getPoints` returns TrackPoints as they are, with the fix beside).
struct StoredBody: Encodable, JSONWritable {
    let stored: StoredPoint
    init(_ stored: StoredPoint) { self.stored = stored }

    private enum Key: String, CodingKey { case measured }

    func encode(to encoder: any Encoder) throws {
        try stored.point.encode(to: encoder)
        var c = encoder.container(keyedBy: Key.self)
        try c.encodeIfPresent(stored.measured, forKey: .measured)
    }

    func write(to w: inout JSONWriter) {
        stored.point.write(to: &w) { $0.field("measured", stored.measured) }
    }
}
