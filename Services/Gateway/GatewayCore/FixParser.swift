import FoundationEssentials
import Model

/// What one payload on `tracker/{device}/fixes` or `owntracks/{user}/{device}` holds.
public enum ParsedPayload: Equatable, Sendable {
    /// The fixes it carried, each valid or not: one bad element never spoils the batch.
    case fixes([Result<NormalizedFix, InputProblem>])
    /// Not a fix at all (an OwnTracks `_type` other than `location`).
    case ignored(reason: String)
    /// The payload as a whole is unusable.
    case refused(InputProblem)
}

/// What was wrong with an input, naming the field: the text of a `badInput` error event.
public struct InputProblem: Error, Equatable, Sendable, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// A fix that passed validation, in the units of the internal messages
/// (`fix.latitude` reads its `reading`).
@dynamicMemberLookup
public struct NormalizedFix: Equatable, Sendable {
    public var timeMs: Int64
    public var reading: Reading
    public var altitudeM: Double?
    public var verticalAccuracyM: Double?
    public var mock: Bool?
    public var batteryPct: Double?
    public var source: FixSource

    public subscript<T>(dynamicMember path: WritableKeyPath<Reading, T>) -> T {
        get { reading[keyPath: path] }
        set { reading[keyPath: path] = newValue }
    }
}

/// Decodes payloads and validates every fix in them.
public struct FixParser: Sendable {
    public var validator: FixValidator

    public init(validator: FixValidator) { self.validator = validator }

    /// A device payload: one fix object or a JSON array of them.
    public func parseDevicePayload(_ payload: [UInt8], nowMs: Int64) -> ParsedPayload {
        if let problem = validator.checkSize(payload) { return .refused(problem) }
        switch payload.first(where: { !Self.isWhitespace($0) }) {
        case UInt8(ascii: "{"):
            // The fast path reads only flat objects without repeated keys.
            if let fix = DeviceFix(flat: payload) {
                return .fixes([validator.validate(fix, source: .device, nowMs: nowMs)])
            }
            if let problem = Self.duplicateKey(payload) { return .refused(problem) }
            do {
                let fix = try JSONCoding.decoder.decode(DeviceFix.self, from: Data(payload))
                return .fixes([validator.validate(fix, source: .device, nowMs: nowMs)])
            } catch {
                return .refused(Self.problem(error))
            }
        case UInt8(ascii: "["):
            if let problem = Self.duplicateKey(payload) { return .refused(problem) }
            do {
                let elements = try JSONCoding.decoder.decode([Lenient<DeviceFix>].self, from: Data(payload))
                guard !elements.isEmpty else { return .refused(InputProblem("payload: empty array, no fix in it")) }
                return .fixes(elements.enumerated().map { index, element in
                    switch element.result {
                    case .success(let fix):
                        return validator.validate(fix, source: .device, nowMs: nowMs)
                            .mapError { InputProblem("[\(index)] \($0.message)") }
                    case .failure(let error):
                        return .failure(Self.problem(error))
                    }
                })
            } catch {
                return .refused(Self.problem(error))
            }
        case nil:
            return .refused(InputProblem("payload is empty"))
        default:
            // Only which message to give depends on it: valid JSON of the wrong shape, or not JSON at all.
            if JSONSyntax.firstProblem(in: payload) == nil {
                return .refused(InputProblem("payload: expected a fix object or an array of fixes"))
            }
            return .refused(InputProblem("payload is not valid JSON"))
        }
    }

    /// An OwnTracks payload (`_type: location`; other types are ignored).
    public func parseOwnTracksPayload(_ payload: [UInt8], nowMs: Int64) -> ParsedPayload {
        if let problem = validator.checkSize(payload) { return .refused(problem) }
        if let problem = Self.duplicateKey(payload) { return .refused(problem) }
        guard payload.contains(where: { !Self.isWhitespace($0) }) else { return .refused(InputProblem("payload is empty")) }
        do {
            let envelope = try JSONCoding.decoder.decode(OwnTracksEnvelope.self, from: Data(payload))
            guard envelope.type == "location" else {
                return .ignored(reason: "OwnTracks _type '\(envelope.type.prefix(40))\(envelope.type.count > 40 ? "…" : "")' is not a location")
            }
            let location = try JSONCoding.decoder.decode(OwnTracksLocation.self, from: Data(payload))
            let result = validator.validate(location.deviceFix, source: .ownTracks, nowMs: nowMs)
            return .fixes([result.mapError { InputProblem($0.message.replacing("speed:", with: "vel:")) }])
        } catch {
            return .refused(Self.problem(error))
        }
    }

    /// One of the apps' messages other than a location, told by its `_type`
    /// as OwnTracks Recorder tells them (whatever the sub-topic it came on).
    public func parseOwnTracksOther(_ payload: [UInt8], nowMs: Int64) -> OwnTracksOther {
        if let problem = validator.checkSize(payload) { return .refused(problem) }
        if let problem = Self.duplicateKey(payload) { return .refused(problem) }
        do {
            let data = Data(payload)
            let envelope = try JSONCoding.decoder.decode(OwnTracksEnvelope.self, from: data)
            switch envelope.type {
            case "transition":
                switch try JSONCoding.decoder.decode(OwnTracksTransition.self, from: data).judged(validator, nowMs: nowMs) {
                case .success(let transition): return .transition(transition)
                case .failure(let problem): return .refused(problem)
                }
            case "waypoint":
                return .region(try JSONCoding.decoder.decode(OwnTracksWaypoint.self, from: data).region)
            case "waypoints":
                return .regions(try JSONCoding.decoder.decode(OwnTracksWaypoints.self, from: data).waypoints.map(\.region))
            case "lwt": return .lastWill
            default: return .ignored(type: String(envelope.type.prefix(40)) + (envelope.type.count > 40 ? "…" : ""))
            }
        } catch {
            return .refused(Self.problem(error))
        }
    }

    /// One rule everywhere: a key given twice is refused, not resolved.
    static func duplicateKey(_ payload: [UInt8]) -> InputProblem? {
        DuplicateKeys.first(in: payload).map { InputProblem("payload: key '\($0)' appears twice in one object") }
    }

    public static func isWhitespace(_ b: UInt8) -> Bool { b == 0x20 || b == 0x0A || b == 0x0D || b == 0x09 }

    static func problem(_ error: any Error) -> InputProblem {
        guard let decodingError = error as? DecodingError else { return InputProblem("\(error)") }
        if case .dataCorrupted(let context) = decodingError, context.codingPath.isEmpty {
            return InputProblem("payload is not valid JSON")
        }
        return InputProblem(DecodingErrorText.describe(decodingError))
    }
}

/// Decodes an element without letting its failure fail the array.
struct Lenient<T: Decodable>: Decodable {
    let result: Result<T, any Error>
    init(from decoder: any Decoder) throws {
        do { result = .success(try T(from: decoder)) } catch { result = .failure(error) }
    }
}

/// What one of the apps' messages other than a location says.
public enum OwnTracksOther: Equatable, Sendable {
    /// `transition`: the app entered or left one of its regions.
    case transition(RegionTransition)
    /// `waypoint`: one region the app defined or changed.
    case region(OwnTracksRegion)
    /// `waypoints`: the app's whole list (an export), which replaces what was kept.
    case regions([OwnTracksRegion])
    /// `lwt`: the broker's last will for the app (its connection was lost).
    case lastWill
    /// Any other `_type` (`cmd`, `card`, `status`, `configuration`, `steps`, …).
    case ignored(type: String)
    case refused(InputProblem)
}

/// A region an OwnTracks app defined (a `waypoint`): a circle, or a beacon when it has no place.
public struct OwnTracksRegion: Equatable, Sendable {
    public var name: String
    public var latitude: Double?
    public var longitude: Double?
    public var radiusM: Double?
    public var regionID: String?
    /// The waypoint's `tst`: when the app created it, which the booklet makes its identity.
    public var createdS: Int64?

    public init(name: String, latitude: Double? = nil, longitude: Double? = nil, radiusM: Double? = nil, regionID: String? = nil,
                createdS: Int64? = nil) {
        self.name = name; self.latitude = latitude; self.longitude = longitude; self.radiusM = radiusM; self.regionID = regionID
        self.createdS = createdS
    }

    /// What tells this region from the app's others, kept when it is renamed or
    /// moved: its `rid` (newer apps), else its `tst`, else its name.
    public var key: String {
        if let regionID, !regionID.isEmpty { return String(regionID.prefix(40)) }
        if let createdS { return String(createdS) }
        return String(name.prefix(40))
    }

    /// A circle the motion service can arm (a beacon region has no place).
    public var circle: (latitude: Double, longitude: Double, radiusM: Double)? {
        guard let latitude, let longitude, let radiusM, radiusM > 0,
              (-90...90).contains(latitude), (-180...180).contains(longitude) else { return nil }
        return (latitude, longitude, radiusM)
    }

    /// `'Home' 48.13700,11.57500 r 100 m`, as a diagnostic names it.
    public var summary: String {
        var text = "'\(name.prefix(60))'"
        if let latitude, let longitude { text += " \(latitude.fixed(5)),\(longitude.fixed(5))" }
        if let radiusM { text += " r \(radiusM.fixed(0)) m" }
        return text
    }
}

struct OwnTracksTransition: Decodable {
    let tst: Double
    let event: String
    let desc: String?
    let rid: String?
    let lat: Double?
    let lon: Double?
    let acc: Double?
    let t: String?

    enum CodingKeys: String, CodingKey { case tst, event, desc, rid, lat, lon, acc, t }

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        tst = try c.decodeLenientNumber(forKey: .tst)
        event = try c.decode(String.self, forKey: .event)
        desc = try c.decodeIfPresent(String.self, forKey: .desc)
        rid = try c.decodeIfPresent(String.self, forKey: .rid)
        lat = try c.decodeLenientNumberIfPresent(forKey: .lat)
        lon = try c.decodeLenientNumberIfPresent(forKey: .lon)
        acc = try c.decodeLenientNumberIfPresent(forKey: .acc)
        t = try c.decodeIfPresent(String.self, forKey: .t)
    }

    /// The transition, judged as a location is for its time and place.
    func judged(_ validator: FixValidator, nowMs: Int64) -> Result<RegionTransition, InputProblem> {
        guard let kind = RegionTransition.Kind(rawValue: event) else {
            return .failure(InputProblem("event: '\(event.prefix(40))' is neither enter nor leave"))
        }
        guard let region = desc ?? rid, !region.isEmpty else {
            return .failure(InputProblem("desc: required field is missing (a transition names its region by desc or rid)"))
        }
        guard region.count <= 200 else { return .failure(InputProblem("desc: longer than 200 characters")) }
        if (lat == nil) != (lon == nil) { return .failure(InputProblem("\(lat == nil ? "lat" : "lon"): required with \(lat == nil ? "lon" : "lat")")) }
        let fix = DeviceFix(t: tst, lat: lat ?? 0, lon: lon ?? 0, acc: acc ?? FixParser.ownTracksDefaultAccuracyM)
        return validator.validate(fix, source: .ownTracks, nowMs: nowMs).map { valid in
            RegionTransition(region: region, event: kind, timeMs: valid.timeMs, latitude: lat, longitude: lon,
                             accuracyM: acc, regionID: rid, trigger: t)
        }
    }
}

struct OwnTracksWaypoint: Decodable {
    let desc: String
    let lat: Double?
    let lon: Double?
    let rad: Double?
    let rid: String?
    let tst: Double?

    enum CodingKeys: String, CodingKey { case desc, lat, lon, rad, rid, tst }

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        desc = try c.decode(String.self, forKey: .desc)
        lat = try c.decodeLenientNumberIfPresent(forKey: .lat)
        lon = try c.decodeLenientNumberIfPresent(forKey: .lon)
        rad = try c.decodeLenientNumberIfPresent(forKey: .rad)
        rid = try c.decodeIfPresent(String.self, forKey: .rid)
        tst = try c.decodeLenientNumberIfPresent(forKey: .tst)
    }

    var region: OwnTracksRegion {
        OwnTracksRegion(name: desc, latitude: lat, longitude: lon, radiusM: rad, regionID: rid,
                        createdS: tst.flatMap { $0.isFinite && abs($0) < 1e12 ? Int64($0) : nil })
    }
}

struct OwnTracksWaypoints: Decodable {
    let waypoints: [OwnTracksWaypoint]
}

struct OwnTracksEnvelope: Decodable {
    let type: String
    enum CodingKeys: String, CodingKey { case type = "_type" }
}

/// OwnTracks' location fields: `vel` is km/h, `vac` the vertical accuracy.
/// `acc` is optional (the apps leave it out when it is 0): a fix without it
/// gets `FixParser.ownTracksDefaultAccuracyM`. Every number may also come as
/// a string (`"48.1"`, `"1793197938"`), as OwnTracks Recorder reads them.
struct OwnTracksLocation: Decodable {
    let tst: Double
    let lat: Double
    let lon: Double
    let acc: Double?
    let vel: Double?
    let cog: Double?
    let alt: Double?
    let vac: Double?
    let batt: Double?

    enum CodingKeys: String, CodingKey { case tst, lat, lon, acc, vel, cog, alt, vac, batt }

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        tst = try c.decodeLenientNumber(forKey: .tst)
        lat = try c.decodeLenientNumber(forKey: .lat)
        lon = try c.decodeLenientNumber(forKey: .lon)
        acc = try c.decodeLenientNumberIfPresent(forKey: .acc)
        vel = try c.decodeLenientNumberIfPresent(forKey: .vel)
        cog = try c.decodeLenientNumberIfPresent(forKey: .cog)
        alt = try c.decodeLenientNumberIfPresent(forKey: .alt)
        vac = try c.decodeLenientNumberIfPresent(forKey: .vac)
        batt = try c.decodeLenientNumberIfPresent(forKey: .batt)
    }

    var deviceFix: DeviceFix {
        DeviceFix(t: tst, lat: lat, lon: lon, acc: acc ?? FixParser.ownTracksDefaultAccuracyM,
                  speed: vel.map { $0 < 0 ? $0 : $0 / 3.6 }, course: cog, alt: alt, vacc: vac, batt: batt)
    }
}

extension FixParser {
    /// The accuracy of an OwnTracks location that has no `acc` (the apps leave
    /// it out when it is 0, which no receiver really measures): 10 m, what
    /// `trackerctl replay` gives a GPX fix without `<hdop>`.
    public static let ownTracksDefaultAccuracyM = 10.0
}

extension KeyedDecodingContainer {
    /// A JSON number, or a string holding one (`"48.1"`), as OwnTracks Recorder
    /// takes them; `null` counts as absent. A string that is not a finite
    /// decimal number is refused, naming the field.
    func decodeLenientNumberIfPresent(forKey key: Key) throws -> Double? {
        guard contains(key), try !decodeNil(forKey: key) else { return nil }
        if let number = try? decode(Double.self, forKey: key) { return number }
        guard let text = try? decode(String.self, forKey: key) else {
            throw DecodingError.typeMismatch(Double.self, .init(codingPath: codingPath + [key], debugDescription: "expected a number"))
        }
        let trimmed = text.trimmingSpaces()
        // Only decimal notation: Double("nan"), "inf" and hex floats are not numbers a phone sends.
        guard !trimmed.isEmpty, trimmed.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2E || $0 == 0x2D || $0 == 0x2B || $0 == 0x65 || $0 == 0x45 }),
              let number = Double(trimmed), number.isFinite else {
            throw DecodingError.dataCorrupted(.init(codingPath: codingPath + [key],
                                                    debugDescription: "expected a number, got the string '\(text.prefix(40))'"))
        }
        return number
    }

    func decodeLenientNumber(forKey key: Key) throws -> Double {
        guard let number = try decodeLenientNumberIfPresent(forKey: key) else {
            if contains(key) {
                throw DecodingError.valueNotFound(Double.self, .init(codingPath: codingPath + [key], debugDescription: "null"))
            }
            throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "missing"))
        }
        return number
    }
}
