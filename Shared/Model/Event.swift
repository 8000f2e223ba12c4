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
        case error(code: String, message: String)
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
        case .diagnostic: "diagnostic"
        case .error: "error"
        case .other(let type, _): type
        }
    }

    private enum Key: String, CodingKey {
        case type, device, timeMs, point, decision, session, durationSec, distanceMeters, code, message
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
            body = .diagnostic(code: try c.decode(String.self, forKey: .code),
                               message: try c.decode(String.self, forKey: .message))
        case "error":
            body = .error(code: try c.decode(String.self, forKey: .code),
                          message: try c.decode(String.self, forKey: .message))
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

struct AnyKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(_ s: String) { stringValue = s }
    init?(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}
