/// An event on `tracker/{device}/events`: `type`, `device`, `timeMs` and the
/// type's own fields, flat in one object. Unknown types decode as `.other`,
/// so consumers keep working when the vocabulary grows.
public struct Event: Codable, Sendable, Equatable {
    public var device: DeviceID
    public var timeMs: Int64
    public var body: Body

    public init(device: DeviceID, timeMs: Int64, _ body: Body) {
        self.device = device; self.timeMs = timeMs; self.body = body
    }

    public enum Body: Sendable, Equatable {
        case location(TrackPoint)
        case locationRejected(Decision)
        case sessionStarted(Session)
        case sessionStopped(Session)
        case trackingGap(durationSec: Double, distanceMeters: Double)
        case diagnostic(code: String, message: String)
        /// A `diagnostic` with code `streamGap`: internal messages that could not be repaired.
        case streamGap(StreamGap)
        case error(code: String, message: String)
        case motionChange(MotionState, point: TrackPoint?)
        case activityChange(activity: String, confidence: Int)
        case heartbeat(point: TrackPoint?)
        case geofenceAdded(Geofence)
        case geofenceRemoved(id: String, fleet: Bool?)
        /// `geofenceEnter`, `geofenceExit` or `geofenceDwell`, by the crossing's kind.
        case geofence(Crossing)
        case tripEnded(Trip)
        case stopEnded(Stop)
        case offRoute(point: TrackPoint?, distanceM: Double)
        case onRoute(point: TrackPoint?, distanceM: Double)
        /// One per exchange with the customer's endpoint; no status when no server answered.
        case httpResponse(statusCode: Int?, count: Int)
        case uploaded(count: Int)
        case retryScheduled(afterSec: Double, reason: String)
        case authExpired
        /// A type this build does not model; its fields are kept as they came.
        case other(type: String, fields: [String: JSONValue])
    }

    public var type: String {
        switch body {
        case .location: "location"
        case .locationRejected: "locationRejected"
        case .sessionStarted: "sessionStarted"
        case .sessionStopped: "sessionStopped"
        case .trackingGap: "trackingGap"
        case .diagnostic, .streamGap: "diagnostic"
        case .error: "error"
        case .motionChange: "motionChange"
        case .activityChange: "activityChange"
        case .heartbeat: "heartbeat"
        case .geofenceAdded: "geofenceAdded"
        case .geofenceRemoved: "geofenceRemoved"
        case .geofence(let c):
            switch c.kind {
            case .enter: "geofenceEnter"
            case .exit: "geofenceExit"
            case .dwell: "geofenceDwell"
            }
        case .tripEnded: "tripEnded"
        case .stopEnded: "stopEnded"
        case .offRoute: "offRoute"
        case .onRoute: "onRoute"
        case .httpResponse: "httpResponse"
        case .uploaded: "uploaded"
        case .retryScheduled: "retryScheduled"
        case .authExpired: "authExpired"
        case .other(let type, _): type
        }
    }

    private enum Key: String, CodingKey {
        case type, device, timeMs, point, decision, session, durationSec, distanceMeters, code, message
        case state, activity, confidence, fence, id, fleet, crossing, trip, stop, distanceM
        case statusCode, count, afterSec, reason, stream, from, to
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: Key.self)
        try c.encode(type, forKey: .type)
        try c.encode(device, forKey: .device)
        try c.encode(timeMs, forKey: .timeMs)
        switch body {
        case .location(let p): try c.encode(p, forKey: .point)
        case .locationRejected(let d): try c.encode(d, forKey: .decision)
        case .sessionStarted(let s), .sessionStopped(let s): try c.encode(s, forKey: .session)
        case .trackingGap(let duration, let distance):
            try c.encode(duration, forKey: .durationSec)
            try c.encode(distance, forKey: .distanceMeters)
        case .diagnostic(let code, let message), .error(let code, let message):
            try c.encode(code, forKey: .code)
            try c.encode(message, forKey: .message)
        case .streamGap(let gap):
            try c.encode(StreamGap.code, forKey: .code)
            try c.encode(gap.message, forKey: .message)
            try c.encode(gap.stream, forKey: .stream)
            try c.encode(gap.from, forKey: .from)
            try c.encode(gap.to, forKey: .to)
            try c.encode(gap.reason, forKey: .reason)
        case .motionChange(let state, let point):
            try c.encode(state, forKey: .state)
            try c.encodeIfPresent(point, forKey: .point)
        case .activityChange(let activity, let confidence):
            try c.encode(activity, forKey: .activity)
            try c.encode(confidence, forKey: .confidence)
        case .heartbeat(let point): try c.encodeIfPresent(point, forKey: .point)
        case .geofenceAdded(let fence): try c.encode(fence, forKey: .fence)
        case .geofenceRemoved(let id, let fleet):
            try c.encode(id, forKey: .id)
            try c.encodeIfPresent(fleet, forKey: .fleet)
        case .geofence(let crossing): try c.encode(crossing, forKey: .crossing)
        case .tripEnded(let trip): try c.encode(TripReport(trip), forKey: .trip)
        case .stopEnded(let stop): try c.encode(stop, forKey: .stop)
        case .offRoute(let point, let distance), .onRoute(let point, let distance):
            try c.encodeIfPresent(point, forKey: .point)
            try c.encode(distance, forKey: .distanceM)
        case .httpResponse(let status, let count):
            try c.encodeIfPresent(status, forKey: .statusCode)
            try c.encode(count, forKey: .count)
        case .uploaded(let count): try c.encode(count, forKey: .count)
        case .retryScheduled(let after, let reason):
            try c.encode(after, forKey: .afterSec)
            try c.encode(reason, forKey: .reason)
        case .authExpired: break
        case .other(_, let fields):
            var any = encoder.container(keyedBy: AnyKey.self)
            for (k, v) in fields where !["type", "device", "timeMs"].contains(k) {
                try any.encode(v, forKey: AnyKey(k))
            }
        }
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Key.self)
        let type = try c.decode(String.self, forKey: .type)
        device = try c.decode(DeviceID.self, forKey: .device)
        timeMs = try c.decode(Int64.self, forKey: .timeMs)
        switch type {
        case "location": body = .location(try c.decode(TrackPoint.self, forKey: .point))
        case "locationRejected": body = .locationRejected(try c.decode(Decision.self, forKey: .decision))
        case "sessionStarted": body = .sessionStarted(try c.decode(Session.self, forKey: .session))
        case "sessionStopped": body = .sessionStopped(try c.decode(Session.self, forKey: .session))
        case "trackingGap":
            body = .trackingGap(durationSec: try c.decode(Double.self, forKey: .durationSec),
                                distanceMeters: try c.decode(Double.self, forKey: .distanceMeters))
        case "diagnostic":
            let code = try c.decode(String.self, forKey: .code)
            if code == StreamGap.code, let stream = try c.decodeIfPresent(String.self, forKey: .stream),
               let from = try c.decodeIfPresent(Int64.self, forKey: .from), let to = try c.decodeIfPresent(Int64.self, forKey: .to),
               let reason = try c.decodeIfPresent(String.self, forKey: .reason).flatMap(StreamGap.Reason.init(rawValue:)) {
                body = .streamGap(StreamGap(stream: stream, from: from, to: to, reason: reason))
            } else {
                body = .diagnostic(code: code, message: try c.decode(String.self, forKey: .message))
            }
        case "error":
            body = .error(code: try c.decode(String.self, forKey: .code),
                          message: try c.decode(String.self, forKey: .message))
        case "motionChange":
            body = .motionChange(try c.decode(MotionState.self, forKey: .state), point: try c.decodeIfPresent(TrackPoint.self, forKey: .point))
        case "activityChange":
            body = .activityChange(activity: try c.decode(String.self, forKey: .activity), confidence: try c.decode(Int.self, forKey: .confidence))
        case "heartbeat": body = .heartbeat(point: try c.decodeIfPresent(TrackPoint.self, forKey: .point))
        case "geofenceAdded": body = .geofenceAdded(try c.decode(Geofence.self, forKey: .fence))
        case "geofenceRemoved":
            body = .geofenceRemoved(id: try c.decode(String.self, forKey: .id), fleet: try c.decodeIfPresent(Bool.self, forKey: .fleet))
        case "geofenceEnter", "geofenceExit", "geofenceDwell":
            var crossing = try c.decode(Crossing.self, forKey: .crossing)
            crossing.kind = type == "geofenceEnter" ? .enter : type == "geofenceExit" ? .exit : .dwell
            body = .geofence(crossing)
        case "tripEnded": body = .tripEnded(try c.decode(Trip.self, forKey: .trip))
        case "stopEnded": body = .stopEnded(try c.decode(Stop.self, forKey: .stop))
        case "httpResponse":
            body = .httpResponse(statusCode: try c.decodeIfPresent(Int.self, forKey: .statusCode), count: try c.decode(Int.self, forKey: .count))
        case "uploaded": body = .uploaded(count: try c.decode(Int.self, forKey: .count))
        case "retryScheduled":
            body = .retryScheduled(afterSec: try c.decode(Double.self, forKey: .afterSec), reason: try c.decode(String.self, forKey: .reason))
        case "authExpired": body = .authExpired
        case "offRoute", "onRoute":
            let point = try c.decodeIfPresent(TrackPoint.self, forKey: .point), distance = try c.decode(Double.self, forKey: .distanceM)
            body = type == "offRoute" ? .offRoute(point: point, distanceM: distance) : .onRoute(point: point, distanceM: distance)
        default:
            var fields = try decoder.singleValueContainer().decode([String: JSONValue].self)
            for key in ["type", "device", "timeMs"] { fields[key] = nil }
            body = .other(type: type, fields: fields)
        }
    }
}

extension Event {
    /// The most of a message an `error` or `diagnostic` event carries: a
    /// problem is named, never the whole offending input echoed back.
    public static let maxMessageCharacters = 300

    /// This event with an over-long message cut to `maxMessageCharacters`.
    public var bounded: Event {
        func cut(_ text: String) -> String {
            guard text.count > Self.maxMessageCharacters else { return text }
            return String(text.prefix(Self.maxMessageCharacters)) + "… (\(text.count - Self.maxMessageCharacters) more characters)"
        }
        var event = self
        switch body {
        case .error(let code, let message): event.body = .error(code: code, message: cut(message))
        case .diagnostic(let code, let message): event.body = .diagnostic(code: code, message: cut(message))
        default: break
        }
        return event
    }
}

extension Event.Body {
    /// A `regionTransition` event: `{"type":"regionTransition", …, "transition":{region, event, timeMs, …}}`.
    /// It travels as `.other` so that the switches over the bodies in other
    /// modules stay exhaustive; `asRegionTransition` reads it back.
    public static func regionTransition(_ transition: RegionTransition) -> Event.Body {
        let value = (try? JSONCoding.decoder.decode(JSONValue.self, from: JSONCoding.encode(transition))) ?? .null
        return .other(type: RegionTransition.eventType, fields: ["transition": value])
    }

    /// The transition of a `regionTransition` event; nil for any other body.
    public var asRegionTransition: RegionTransition? {
        guard case .other(RegionTransition.eventType, let fields) = self, let value = fields["transition"] else { return nil }
        return try? JSONCoding.decoder.decode(RegionTransition.self, from: JSONCoding.encode(value))
    }
}

/// An OwnTracks `transition`: the app entered or left a region it defined
/// itself (a `waypoint`), which Tracker did not judge; `timeMs` is the
/// app's `tst`, the place is where the app was when it fired.
public struct RegionTransition: Codable, Sendable, Equatable {
    public static let eventType = "regionTransition"
    public enum Kind: String, Codable, Sendable, CaseIterable { case enter, leave }
    /// The region's name (the app's `desc`; its `rid` when there is no name).
    public var region: String
    public var event: Kind
    public var timeMs: Int64
    public var latitude: Double?
    public var longitude: Double?
    public var accuracyM: Double?
    /// The app's region id (`rid`).
    public var regionID: String?
    /// What fired it (`t`): `c` a circular region, `b` a beacon, `l` a location update.
    public var trigger: String?

    public init(region: String, event: Kind, timeMs: Int64, latitude: Double? = nil, longitude: Double? = nil,
                accuracyM: Double? = nil, regionID: String? = nil, trigger: String? = nil) {
        self.region = region; self.event = event; self.timeMs = timeMs
        self.latitude = latitude; self.longitude = longitude; self.accuracyM = accuracyM
        self.regionID = regionID; self.trigger = trigger
    }
}

/// Internal messages a consumer never got and could not get back from the
/// producer's log: seqs `from…to` of one device's `stream`.
public struct StreamGap: Sendable, Equatable {
    public static let code = "streamGap"

    public enum Reason: String, Sendable, Codable {
        /// The producer's log no longer holds them (trimmed by its retention).
        case trimmed
        /// The producer's store was replaced: its numbering started over.
        case producerReset
        /// The producer did not answer within the repair timeout.
        case noAnswer
    }

    public var stream: String
    public var from: Int64
    public var to: Int64
    public var reason: Reason

    public init(stream: String, from: Int64, to: Int64, reason: Reason) {
        self.stream = stream; self.from = from; self.to = to; self.reason = reason
    }

    public var message: String {
        let count = to - from + 1
        let why = switch reason {
        case .trimmed: "the producer's log no longer holds them"
        case .producerReset: "the producer's store was replaced"
        case .noAnswer: "the producer did not answer in time"
        }
        return "\(stream): \(count) message(s) seq \(from)…\(to) missed and not repaired (\(why)); going on without them"
    }
}

struct AnyKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(_ s: String) { stringValue = s }
    init?(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}
