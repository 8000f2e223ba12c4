/// A direct JSON writer for the messages on the hot path. Foundation's
/// JSONEncoder goes through generic containers and was the largest single
/// cost per message; these types write themselves instead. Output is plain
/// JSON that JSONDecoder reads back to the same value (tested), keys sorted.
public struct JSONWriter {
    public private(set) var bytes: [UInt8] = []
    private var first = true

    public init() { bytes.reserveCapacity(384) }

    public mutating func beginObject() { comma(); bytes.append(UInt8(ascii: "{")); first = true }
    public mutating func endObject() { bytes.append(UInt8(ascii: "}")); first = false }
    public mutating func beginArray() { comma(); bytes.append(UInt8(ascii: "[")); first = true }
    public mutating func endArray() { bytes.append(UInt8(ascii: "]")); first = false }

    /// The key of the next value; call it before writing that value.
    public mutating func key(_ key: StaticString) {
        comma()
        bytes.append(UInt8(ascii: "\""))
        key.withUTF8Buffer { bytes.append(contentsOf: $0) }
        bytes.append(contentsOf: [UInt8(ascii: "\""), UInt8(ascii: ":")])
        first = true  // the value follows without a comma
    }

    public mutating func value(_ v: String) { comma(); string(v) }
    public mutating func value(_ v: Int64) { comma(); bytes.append(contentsOf: String(v).utf8) }
    public mutating func value(_ v: Bool) { comma(); bytes.append(contentsOf: (v ? "true" : "false").utf8) }
    public mutating func value(_ v: Double) {
        comma()
        guard v.isFinite else { bytes.append(contentsOf: "null".utf8); return }
        Self.appendNumber(v, to: &bytes)
    }
    public mutating func null() { comma(); bytes.append(contentsOf: "null".utf8) }
    public mutating func value(_ v: some JSONWritable) { v.write(to: &self) }

    public mutating func field(_ k: StaticString, _ v: String) { key(k); value(v) }
    public mutating func field(_ k: StaticString, _ v: Int64) { key(k); value(v) }
    public mutating func field(_ k: StaticString, _ v: Double) { key(k); value(v) }
    public mutating func field(_ k: StaticString, _ v: Bool) { key(k); value(v) }
    public mutating func field(_ k: StaticString, _ v: some JSONWritable) { key(k); v.write(to: &self) }
    /// Absent values are left out, as JSONEncoder does.
    public mutating func field(_ k: StaticString, _ v: String?) { if let v { field(k, v) } }
    public mutating func field(_ k: StaticString, _ v: Double?) { if let v { field(k, v) } }
    public mutating func field(_ k: StaticString, _ v: Int64?) { if let v { field(k, v) } }
    public mutating func field(_ k: StaticString, _ v: Bool?) { if let v { field(k, v) } }
    public mutating func field<T: JSONWritable>(_ k: StaticString, _ v: T?) { if let v { field(k, v) } }

    private mutating func comma() {
        if first { first = false } else { bytes.append(UInt8(ascii: ",")) }
    }

    private mutating func string(_ s: String) { Self.appendQuoted(s, to: &bytes) }

    /// A finite number as JSONEncoder writes it: whole ones without a
    /// fraction, others in the shortest digits that read back as `v` (a
    /// Float's own, not its Double's). Shared with `JSONStreamEncoder`.
    static func appendNumber<F: BinaryFloatingPoint & LosslessStringConvertible>(_ v: F, to bytes: inout [UInt8]) {
        if v.rounded() == v, abs(v) < 9e15 {
            bytes.append(contentsOf: String(Int64(v)).utf8)
        } else {
            bytes.append(contentsOf: v.description.utf8)
        }
    }

    /// `s` as a JSON string, quotes included (and `JSONStreamEncoder`'s).
    static func appendQuoted(_ s: String, to bytes: inout [UInt8]) {
        bytes.append(UInt8(ascii: "\""))
        var s = s
        s.withUTF8 { utf8 in
            // Field names and most values need no escaping: copied at once.
            guard utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) else {
                bytes.append(contentsOf: utf8)
                return
            }
            for b in utf8 {
                switch b {
                case UInt8(ascii: "\""): bytes.append(contentsOf: [92, 34])
                case UInt8(ascii: "\\"): bytes.append(contentsOf: [92, 92])
                case 0x0A: bytes.append(contentsOf: [92, UInt8(ascii: "n")])
                case 0x0D: bytes.append(contentsOf: [92, UInt8(ascii: "r")])
                case 0x09: bytes.append(contentsOf: [92, UInt8(ascii: "t")])
                case 0..<0x20:
                    let hex = Array("0123456789abcdef".utf8)
                    bytes.append(contentsOf: [92, UInt8(ascii: "u"), 48, 48, hex[Int(b >> 4)], hex[Int(b & 0xF)]])
                default: bytes.append(b)
                }
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }
}

/// A type that writes its own JSON (the same shape its Codable produces).
public protocol JSONWritable {
    func write(to w: inout JSONWriter)
}

/// A string-backed value writes its raw value: conforming says it all.
extension JSONWritable where Self: RawRepresentable, RawValue == String {
    public func write(to w: inout JSONWriter) { w.value(rawValue) }
}

extension JSONCoding {
    /// Whether the hand-written fast paths (this writer, `FlatJSONObject`)
    /// are used; `TRACKER_JSON=foundation` turns them off, so a benchmark can
    /// measure what they are worth in the same run.
    public static let fastPaths = ProcessInfo.processInfo.environment["TRACKER_JSON"] != "foundation"

    /// The direct writer, for types that have one; picked over the generic
    /// `encode` by overload resolution wherever the type is known.
    public static func encode(_ value: some Encodable & JSONWritable) -> Data { Data(bytes(value)) }

    /// `encode`'s bytes, without a `Data` between the writer and the caller
    /// (a message's payload and a log's body are byte arrays).
    public static func bytes(_ value: some Encodable & JSONWritable) -> [UInt8] {
        guard fastPaths else { return Array(foundationEncode(value)) }
        var w = JSONWriter()
        value.write(to: &w)
        return w.bytes
    }

    public static func string(_ value: some Encodable & JSONWritable) -> String {
        String(decoding: bytes(value), as: UTF8.self)
    }
}

import FoundationEssentials

extension DeviceID: JSONWritable {
    public func write(to w: inout JSONWriter) { w.value(rawValue) }
}

extension FixSource: JSONWritable {}

extension MotionState: JSONWritable {}

extension DeviceFix: JSONWritable {
    public func write(to w: inout JSONWriter) {
        w.beginObject()
        w.field("acc", acc)
        w.field("alt", alt)
        w.field("batt", batt)
        w.field("course", course)
        w.field("lat", lat)
        w.field("lon", lon)
        w.field("mock", mock)
        w.field("speed", speed)
        w.field("t", t)
        w.field("vacc", vacc)
        w.endObject()
    }
}

extension RawFix: JSONWritable {
    public func write(to w: inout JSONWriter) {
        w.beginObject()
        w.field("accuracyM", accuracyM)
        w.field("altitudeM", altitudeM)
        w.field("batteryPct", batteryPct)
        w.field("courseDeg", courseDeg)
        w.field("device", device)
        w.field("epoch", epoch)
        w.field("latitude", latitude)
        w.field("longitude", longitude)
        w.field("mock", mock)
        w.field("prev", prev)
        w.field("receivedMs", receivedMs)
        w.field("seq", seq)
        w.field("sessionID", sessionID)
        w.field("source", source)
        w.field("speedMps", speedMps)
        w.field("timeMs", timeMs)
        w.field("verticalAccuracyM", verticalAccuracyM)
        w.endObject()
    }
}

extension TrackPoint: JSONWritable {
    public func write(to w: inout JSONWriter) { write(to: &w) { _ in } }

    /// The point's fields and, before the object closes, whatever `extra`
    /// writes beside them (a stored point's fix, a queued point's device).
    public func write(to w: inout JSONWriter, adding extra: (inout JSONWriter) -> Void) {
        w.beginObject()
        w.field("accuracyM", accuracyM)
        w.field("courseDeg", courseDeg)
        w.field("latitude", latitude)
        w.field("longitude", longitude)
        w.field("odometerM", odometerM)
        w.field("seq", seq)
        w.field("sessionID", sessionID)
        w.field("speedMps", speedMps)
        w.field("timeMs", timeMs)
        extra(&w)
        w.endObject()
    }
}

extension PointMessage: JSONWritable {
    public func write(to w: inout JSONWriter) {
        w.beginObject()
        w.field("device", device)
        w.field("epoch", epoch)
        w.field("measured", measured)
        w.field("point", point)
        w.field("prev", prev)
        w.field("receivedMs", receivedMs)
        w.endObject()
    }
}

extension MotionMessage: JSONWritable {
    public func write(to w: inout JSONWriter) {
        w.beginObject()
        w.field("device", device)
        w.field("epoch", epoch)
        w.field("prev", prev)
        w.field("seq", seq)
        w.field("state", state)
        w.field("timeMs", timeMs)
        w.endObject()
    }
}

extension Reading: JSONWritable {
    public func write(to w: inout JSONWriter) {
        w.beginObject()
        w.field("accuracyM", accuracyM)
        w.field("altitudeM", altitudeM)
        w.field("batteryPct", batteryPct)
        w.field("courseDeg", courseDeg)
        w.field("latitude", latitude)
        w.field("longitude", longitude)
        w.field("speedMps", speedMps)
        w.endObject()
    }
}

extension Estimate: JSONWritable {
    public func write(to w: inout JSONWriter) {
        w.beginObject()
        w.field("accuracyM", accuracyM)
        w.field("latitude", latitude)
        w.field("longitude", longitude)
        w.field("speedMps", speedMps)
        w.endObject()
    }
}

extension Decision: JSONWritable {
    public func write(to w: inout JSONWriter) {
        w.beginObject()
        w.field("accepted", accepted)
        w.field("estimate", estimate)
        w.field("limit", limit)
        w.field("measured", measured)
        w.field("reason", reason)
        w.field("seq", seq)
        w.field("timeMs", timeMs)
        w.endObject()
    }
}

extension Session: JSONWritable {
    public func write(to w: inout JSONWriter) {
        w.beginObject()
        w.field("auto", auto)
        w.field("device", device)
        w.field("endMs", endMs)
        w.field("id", id)
        w.field("startMs", startMs)
        w.field("tag", tag)
        w.endObject()
    }
}

extension JSONValue: JSONWritable {
    public func write(to w: inout JSONWriter) {
        switch self {
        case .null: w.null()
        case .bool(let b): w.value(b)
        case .number(let n): w.value(n)
        case .string(let s): w.value(s)
        case .array(let items):
            w.beginArray()
            items.forEach { $0.write(to: &w) }
            w.endArray()
        case .object(let fields):
            // Keys are dynamic here: write them through the escaping path.
            w.beginObject()
            for (k, v) in fields.sorted(by: { $0.key < $1.key }) {
                w.dynamicKey(k)
                v.write(to: &w)
            }
            w.endObject()
        }
    }
}

extension JSONWriter {
    /// A key only known at run time (JSONValue objects, unknown event fields).
    public mutating func dynamicKey(_ key: String) {
        value(key)
        bytes.append(UInt8(ascii: ":"))
        first = true
    }
}

extension Event: JSONWritable {
    public func write(to w: inout JSONWriter) {
        w.beginObject()
        switch body {
        case .location(let p):
            w.field("device", device)
            w.field("point", p)
        case .locationRejected(let d):
            w.field("decision", d)
            w.field("device", device)
        case .sessionStarted(let s), .sessionStopped(let s):
            w.field("device", device)
            w.field("session", s)
        case .trackingGap(let duration, let distance):
            w.field("device", device)
            w.field("distanceMeters", distance)
            w.field("durationSec", duration)
        case .diagnostic(let code, let message), .error(let code, let message):
            w.field("code", code)
            w.field("device", device)
            w.field("message", message)
        case .other(_, let fields):
            w.field("device", device)
            for (k, v) in fields.sorted(by: { $0.key < $1.key }) where !["type", "device", "timeMs"].contains(k) {
                w.dynamicKey(k)
                v.write(to: &w)
            }
        case .motionChange(let state, let point):
            w.field("device", device)
            w.field("point", point)
            w.field("state", state)
        case .activityChange(let activity, let confidence):
            w.field("activity", activity)
            w.field("confidence", Int64(confidence))
            w.field("device", device)
        case .heartbeat(let point):
            w.field("device", device)
            w.field("point", point)
        case .geofenceAdded(let fence):
            w.field("device", device)
            w.field("fence", fence)
        case .geofenceRemoved(let id, let fleet):
            w.field("device", device)
            w.field("fleet", fleet)
            w.field("id", id)
        case .geofence(let crossing):
            w.field("crossing", crossing)
            w.field("device", device)
        case .tripEnded(let trip):
            w.field("device", device)
            w.field("trip", TripReport(trip))
        case .stopEnded(let stop):
            w.field("device", device)
            w.field("stop", stop)
        case .offRoute(let point, let distance), .onRoute(let point, let distance):
            w.field("device", device)
            w.field("distanceM", distance)
            w.field("point", point)
        case .httpResponse(let status, let count):
            w.field("count", Int64(count))
            w.field("device", device)
            w.field("statusCode", status.map(Int64.init))
        case .uploaded(let count):
            w.field("count", Int64(count))
            w.field("device", device)
        case .retryScheduled(let after, let reason):
            w.field("afterSec", after)
            w.field("device", device)
            w.field("reason", reason)
        case .authExpired:
            w.field("device", device)
        case .streamGap(let gap):
            w.field("code", StreamGap.code)
            w.field("device", device)
            w.field("from", gap.from)
            w.field("message", gap.message)
            w.field("reason", gap.reason.rawValue)
            w.field("stream", gap.stream)
        }
        w.field("timeMs", timeMs)
        // Sorted keys: `to` falls between `timeMs` and `type`.
        if case .streamGap(let gap) = body { w.field("to", gap.to) }
        w.field("type", type)
        w.endObject()
    }
}

// The motion service's bodies: keys in sorted order, as JSONEncoder's `.sortedKeys` writes them.

extension Crossing.Kind: JSONWritable {}

extension RegionTransition.Kind: JSONWritable {}

extension RegionTransition: JSONWritable {
    public func write(to w: inout JSONWriter) {
        w.beginObject()
        w.field("accuracyM", accuracyM)
        w.field("event", event)
        w.field("latitude", latitude)
        w.field("longitude", longitude)
        w.field("region", region)
        w.field("regionID", regionID)
        w.field("timeMs", timeMs)
        w.field("trigger", trigger)
        w.endObject()
    }
}

extension Crossing: JSONWritable {
    public func write(to w: inout JSONWriter) {
        w.beginObject()
        w.field("device", device)
        w.field("fleet", fleet)
        w.field("geofenceID", geofenceID)
        w.field("interpolated", interpolated)
        w.field("kind", kind)
        w.field("latitude", latitude)
        w.field("longitude", longitude)
        w.field("timeMs", timeMs)
        w.endObject()
    }
}

extension Geofence: JSONWritable {
    public func write(to w: inout JSONWriter) {
        w.beginObject()
        w.field("dwellAfterMs", dwellAfterMs)
        w.field("fleet", fleet)
        w.field("id", id)
        w.field("latitude", latitude)
        w.field("longitude", longitude)
        w.field("notifyOnEntry", notifyOnEntry)
        w.field("notifyOnExit", notifyOnExit)
        w.field("radiusM", radiusM)
        w.endObject()
    }
}

extension Stop: JSONWritable {
    public func write(to w: inout JSONWriter) {
        w.beginObject()
        w.field("arrivalMs", arrivalMs)
        w.field("departureMs", departureMs)
        w.field("latitude", latitude)
        w.field("longitude", longitude)
        w.field("sessionID", sessionID)
        w.endObject()
    }
}

extension TripReport: JSONWritable {
    public func write(to w: inout JSONWriter) {
        w.beginObject()
        w.field("averageSpeedMps", trip.averageSpeedMps)
        w.field("distanceM", trip.distanceM)
        w.field("durationSec", trip.durationSec)
        w.field("endLatitude", trip.endLatitude)
        w.field("endLongitude", trip.endLongitude)
        w.field("endMs", trip.endMs)
        w.field("maxSpeedMps", trip.maxSpeedMps)
        w.field("sessionID", trip.sessionID)
        w.field("startLatitude", trip.startLatitude)
        w.field("startLongitude", trip.startLongitude)
        w.field("startMs", trip.startMs)
        w.field("startOdometerM", trip.startOdometerM)
        w.endObject()
    }
}
