/// A one-pass reader for flat JSON objects of plain scalars — the shape of
/// every fix on the hot path — and objects one level down (a point inside
/// its message). It returns nil for anything else (deeper nesting, arrays,
/// escapes, duplicate keys, malformed input), and the caller then uses
/// JSONDecoder, which stays the judge of every unusual payload and the
/// author of every error message. Measured: JSONDecoder was the largest
/// cost per fix after the database.
public struct FlatJSONObject {
    enum Kind { case number, string, bool, null, object }
    /// Positions in `source`, not slices: a slice per field retains the
    /// buffer again, and this runs for every message.
    struct Field {
        var key: Range<Int>
        var kind: Kind
        var value: Range<Int>
    }
    private let source: ArraySlice<UInt8>
    private var fields: [Field] = []

    /// With `objects`, a value may be a flat object itself (read with `object`).
    public init?(_ bytes: [UInt8], objects: Bool = false) { self.init(bytes[...], nesting: objects ? 1 : 0) }

    private init?(_ bytes: ArraySlice<UInt8>, nesting: Int) {
        source = bytes
        fields.reserveCapacity(16)
        var i = bytes.startIndex
        let end = bytes.endIndex
        func skipSpace() { while i < end, bytes[i] == 0x20 || bytes[i] == 0x0A || bytes[i] == 0x0D || bytes[i] == 0x09 { i += 1 } }
        /// A string without escapes or control characters; nil otherwise.
        func string() -> Range<Int>? {
            guard i < end, bytes[i] == UInt8(ascii: "\"") else { return nil }
            i += 1
            let start = i
            while i < end, bytes[i] != UInt8(ascii: "\"") {
                if bytes[i] == UInt8(ascii: "\\") || bytes[i] < 0x20 { return nil }
                i += 1
            }
            guard i < end else { return nil }
            defer { i += 1 }
            return start..<i
        }
        /// A number in strict JSON grammar.
        func number() -> Range<Int>? {
            let start = i
            if i < end, bytes[i] == UInt8(ascii: "-") { i += 1 }
            guard i < end, isDigit(bytes[i]) else { return nil }
            if bytes[i] == UInt8(ascii: "0") { i += 1 } else { while i < end, isDigit(bytes[i]) { i += 1 } }
            if i < end, bytes[i] == UInt8(ascii: ".") {
                i += 1
                guard i < end, isDigit(bytes[i]) else { return nil }
                while i < end, isDigit(bytes[i]) { i += 1 }
            }
            if i < end, bytes[i] == UInt8(ascii: "e") || bytes[i] == UInt8(ascii: "E") {
                i += 1
                if i < end, bytes[i] == UInt8(ascii: "+") || bytes[i] == UInt8(ascii: "-") { i += 1 }
                guard i < end, isDigit(bytes[i]) else { return nil }
                while i < end, isDigit(bytes[i]) { i += 1 }
            }
            return start..<i
        }
        func literal(_ word: StaticString) -> Bool {
            let count = word.utf8CodeUnitCount
            guard end - i >= count else { return false }
            let matches = word.withUTF8Buffer { w in (0..<count).allSatisfy { bytes[i + $0] == w[$0] } }
            if matches { i += count }
            return matches
        }

        skipSpace()
        guard i < end, bytes[i] == UInt8(ascii: "{") else { return nil }
        i += 1
        skipSpace()
        if i < end, bytes[i] == UInt8(ascii: "}") {
            i += 1
        } else {
            while true {
                skipSpace()
                guard let key = string() else { return nil }
                skipSpace()
                guard i < end, bytes[i] == UInt8(ascii: ":") else { return nil }
                i += 1
                skipSpace()
                guard i < end else { return nil }
                let start = i
                let kind: Kind
                switch bytes[i] {
                case UInt8(ascii: "\""): guard string() != nil else { return nil }; kind = .string
                case UInt8(ascii: "t"): guard literal("true") else { return nil }; kind = .bool
                case UInt8(ascii: "f"): guard literal("false") else { return nil }; kind = .bool
                case UInt8(ascii: "n"): guard literal("null") else { return nil }; kind = .null
                case UInt8(ascii: "{"):
                    // A flat object inside: its extent, checked when it is read.
                    guard nesting > 0 else { return nil }
                    while i < end, bytes[i] != UInt8(ascii: "}") {
                        if bytes[i] == UInt8(ascii: "{") && i != start || bytes[i] == UInt8(ascii: "[") { return nil }
                        if bytes[i] == UInt8(ascii: "\"") { guard string() != nil else { return nil } } else { i += 1 }
                    }
                    guard i < end else { return nil }
                    i += 1
                    kind = .object
                default: guard number() != nil else { return nil }; kind = .number
                }
                var value = start..<i
                if kind == .string { value = (start + 1)..<(i - 1) }
                if fields.contains(where: { Self.equal(bytes, $0.key, key) }) { return nil }  // duplicate key
                fields.append(Field(key: key, kind: kind, value: value))
                skipSpace()
                guard i < end else { return nil }
                if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
                guard bytes[i] == UInt8(ascii: "}") else { return nil }
                i += 1
                break
            }
        }
        skipSpace()
        guard i == end else { return nil }
    }

    private static func equal(_ bytes: ArraySlice<UInt8>, _ a: Range<Int>, _ b: Range<Int>) -> Bool {
        guard a.count == b.count else { return false }
        for offset in 0..<a.count where bytes[a.lowerBound + offset] != bytes[b.lowerBound + offset] { return false }
        return true
    }

    private func field(_ key: StaticString) -> Field? {
        key.withUTF8Buffer { k in
            fields.first { f in
                guard f.key.count == k.count else { return false }
                for offset in 0..<k.count where source[f.key.lowerBound + offset] != k[offset] { return false }
                return true
            }
        }
    }

    /// The outcome of reading one field: absent (or null), a value, or the
    /// wrong type (the caller gives up and lets JSONDecoder explain).
    public enum Read<T> { case absent, value(T), mismatch }

    public func double(_ key: StaticString) -> Read<Double> {
        guard let f = field(key), f.kind != .null else { return .absent }
        guard f.kind == .number, let d = Double(String(decoding: source[f.value], as: UTF8.self)), d.isFinite else { return .mismatch }
        return .value(d)
    }

    /// Integers only in plain integer form (as JSONDecoder reads Int64).
    public func int64(_ key: StaticString) -> Read<Int64> {
        guard let f = field(key), f.kind != .null else { return .absent }
        guard f.kind == .number, let n = Int64(String(decoding: source[f.value], as: UTF8.self)) else { return .mismatch }
        return .value(n)
    }

    public func string(_ key: StaticString) -> Read<String> {
        guard let f = field(key), f.kind != .null else { return .absent }
        guard f.kind == .string else { return .mismatch }
        return .value(String(decoding: source[f.value], as: UTF8.self))
    }

    /// A flat object one level down.
    public func object(_ key: StaticString) -> Read<FlatJSONObject> {
        guard let f = field(key), f.kind != .null else { return .absent }
        guard f.kind == .object, let inner = FlatJSONObject(source[f.value], nesting: 0) else { return .mismatch }
        return .value(inner)
    }

    public func bool(_ key: StaticString) -> Read<Bool> {
        guard let f = field(key), f.kind != .null else { return .absent }
        guard f.kind == .bool else { return .mismatch }
        return .value(source[f.value.lowerBound] == UInt8(ascii: "t"))
    }
}

private func isDigit(_ b: UInt8) -> Bool { b >= 0x30 && b <= 0x39 }

extension FlatJSONObject.Read {
    /// A required field: nil unless present with the right type.
    public var required: T? { if case .value(let v) = self { v } else { nil } }
    /// An optional field: .some(nil) when absent, nil on a type mismatch.
    public var optional: T?? {
        switch self {
        case .absent: .some(nil)
        case .value(let v): .some(v)
        case .mismatch: nil
        }
    }
}

extension DeviceFix {
    /// The fast path for a single fix; nil means "ask JSONDecoder".
    public init?(flat bytes: [UInt8]) {
        guard JSONCoding.fastPaths, let o = FlatJSONObject(bytes),
              let t = o.double("t").required, let lat = o.double("lat").required,
              let lon = o.double("lon").required, let acc = o.double("acc").required,
              let speed = o.double("speed").optional, let course = o.double("course").optional,
              let alt = o.double("alt").optional, let vacc = o.double("vacc").optional,
              let mock = o.bool("mock").optional, let batt = o.double("batt").optional else { return nil }
        self.init(t: t, lat: lat, lon: lon, acc: acc, speed: speed, course: course, alt: alt, vacc: vacc, mock: mock, batt: batt)
    }
}

extension RawFix {
    /// The fast path for the internal raw message; nil means "ask JSONDecoder".
    public init?(flat bytes: [UInt8]) {
        guard JSONCoding.fastPaths, let o = FlatJSONObject(bytes),
              let deviceText = o.string("device").required, let device = DeviceID(deviceText),
              let seq = o.int64("seq").required, let sessionID = o.string("sessionID").optional,
              let timeMs = o.int64("timeMs").required, let receivedMs = o.int64("receivedMs").required,
              let sourceText = o.string("source").required, let source = FixSource(rawValue: sourceText),
              let latitude = o.double("latitude").required, let longitude = o.double("longitude").required,
              let accuracyM = o.double("accuracyM").required,
              let speedMps = o.double("speedMps").optional, let courseDeg = o.double("courseDeg").optional,
              let altitudeM = o.double("altitudeM").optional, let verticalAccuracyM = o.double("verticalAccuracyM").optional,
              let mock = o.bool("mock").optional, let batteryPct = o.double("batteryPct").optional,
              let epoch = o.string("epoch").optional, let prev = o.int64("prev").optional else { return nil }
        self.init(device: device, seq: seq, sessionID: sessionID, timeMs: timeMs, receivedMs: receivedMs, source: source,
                  latitude: latitude, longitude: longitude, accuracyM: accuracyM, speedMps: speedMps, courseDeg: courseDeg,
                  altitudeM: altitudeM, verticalAccuracyM: verticalAccuracyM, mock: mock, batteryPct: batteryPct, epoch: epoch,
                  prev: prev)
    }
}

extension MotionMessage {
    /// The fast path for the internal motion message; nil means "ask JSONDecoder".
    public init?(flat bytes: [UInt8]) {
        guard JSONCoding.fastPaths, let o = FlatJSONObject(bytes),
              let deviceText = o.string("device").required, let device = DeviceID(deviceText),
              let seq = o.int64("seq").required, let timeMs = o.int64("timeMs").required,
              let stateText = o.string("state").required, let state = MotionState(rawValue: stateText),
              let epoch = o.string("epoch").optional, let prev = o.int64("prev").optional else { return nil }
        self.init(device: device, seq: seq, timeMs: timeMs, state: state, epoch: epoch, prev: prev)
    }
}

extension PointMessage {
    /// The fast path for the internal points message; nil means "ask JSONDecoder".
    public init?(flat bytes: [UInt8]) {
        guard JSONCoding.fastPaths, let o = FlatJSONObject(bytes, objects: true),
              let deviceText = o.string("device").required, let device = DeviceID(deviceText),
              let epoch = o.string("epoch").optional, let p = o.object("point").required,
              let point = TrackPoint(flat: p), let m = o.object("measured").optional,
              let prev = o.int64("prev").optional, let receivedMs = o.int64("receivedMs").optional else { return nil }
        var measured: MeasuredFix?
        if let m {
            guard let lat = m.double("latitude").required, let lon = m.double("longitude").required,
                  let acc = m.double("accuracyM").required, let speed = m.double("speedMps").optional,
                  let course = m.double("courseDeg").optional, let altitude = m.double("altitudeM").optional,
                  let battery = m.double("batteryPct").optional else { return nil }
            measured = MeasuredFix(latitude: lat, longitude: lon, accuracyM: acc, speedMps: speed, courseDeg: course,
                                   altitudeM: altitude, batteryPct: battery)
        }
        self.init(device: device, point: point, epoch: epoch, measured: measured, prev: prev, receivedMs: receivedMs)
    }
}

extension TrackPoint {
    /// The fast path for a stored point; nil means "ask JSONDecoder".
    public init?(flat bytes: [UInt8]) {
        guard JSONCoding.fastPaths, let o = FlatJSONObject(bytes) else { return nil }
        self.init(flat: o)
    }

    /// A point's fields in a parsed object (a point message's `point`).
    init?(flat p: FlatJSONObject) {
        guard let seq = p.int64("seq").required, let sessionID = p.string("sessionID").optional,
              let timeMs = p.int64("timeMs").required, let latitude = p.double("latitude").required,
              let longitude = p.double("longitude").required, let accuracyM = p.double("accuracyM").required,
              let speedMps = p.double("speedMps").optional, let courseDeg = p.double("courseDeg").optional,
              let odometerM = p.double("odometerM").required else { return nil }
        self.init(seq: seq, sessionID: sessionID, timeMs: timeMs, latitude: latitude, longitude: longitude,
                  accuracyM: accuracyM, speedMps: speedMps, courseDeg: courseDeg, odometerM: odometerM)
    }
}
