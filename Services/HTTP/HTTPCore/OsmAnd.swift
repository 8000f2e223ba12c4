import Foundation
import Model

/// The OsmAnd protocol as Traccar Client sends it and Traccar's
/// `OsmAndProtocolDecoder` reads it: query (or form) parameters from the
/// classic apps, a JSON body from the Flutter app (v9).
public struct OsmAndRequest: Equatable, Sendable {
    /// The device identifier the app sends: an ingest token, or a device id with credentials.
    public var id: String
    public var fixes: [DeviceFix]

    /// Without `accuracy` (or with 0, which Traccar Client sends for a GPS fix) and `hdop`:
    /// the accuracy `trackerctl replay` gives a GPX fix without `<hdop>`.
    public static let defaultAccuracyM = 10.0
    static let metresPerSecondPerKnot = 0.514444

    public static func parse(_ request: HTTPRequest, nowMs: Int64) -> Result<OsmAndRequest, HTTPError> {
        if request.header("content-type")?.lowercased().hasPrefix("application/json") == true {
            return parseJSON(request.body)
        }
        return parse(parameters: request.parameters, nowMs: nowMs)
    }

    public static func parse(parameters p: [String: String], nowMs: Int64) -> Result<OsmAndRequest, HTTPError> {
        guard let id = p["id"] ?? p["deviceid"], !id.isEmpty else { return .failure(.badInput("id: required (the device identifier)")) }
        do {
            var lat = try number(p, "lat"), lon = try number(p, "lon")
            if lat == nil, lon == nil, let location = p["location"] {
                let parts = location.split(separator: ",").map { Double($0.trimmingCharacters(in: .whitespaces)) }
                guard parts.count == 2, let a = parts[0], let b = parts[1] else {
                    return .failure(.badInput("location: expected 'lat,lon', got '\(location.prefix(60))'"))
                }
                (lat, lon) = (a, b)
            }
            guard let lat else { return .failure(.badInput("lat: required")) }
            guard let lon else { return .failure(.badInput("lon: required")) }
            if p["valid"].map({ $0 == "false" || $0 == "0" }) == true {
                return .failure(.badInput("valid: the app marked this fix invalid; not tracked"))
            }
            let t = try p["timestamp"].map(seconds) ?? Double(nowMs) / 1000
            var accuracy = try number(p, "accuracy").flatMap { $0 > 0 ? $0 : nil }
            if accuracy == nil, let hdop = try number(p, "hdop"), hdop > 0 { accuracy = hdop * 5 }
            let speed = try number(p, "speed").map { $0 < 0 ? $0 : $0 * metresPerSecondPerKnot }
            let course = try number(p, "bearing") ?? (try number(p, "heading"))
            let fix = DeviceFix(t: t, lat: lat, lon: lon, acc: accuracy ?? defaultAccuracyM, speed: speed, course: course,
                                alt: try number(p, "altitude"), mock: p["mock"].map { $0 == "true" || $0 == "1" },
                                batt: try number(p, "batt"))
            return .success(OsmAndRequest(id: id, fixes: [fix]))
        } catch let error as HTTPError {
            return .failure(error)
        } catch {
            return .failure(.badInput("\(error)"))
        }
    }

    /// `{"location": {…} or [{…}], "device_id": "…"}`: speed in m/s, heading in degrees, −1 for unknown; battery 0…1.
    static func parseJSON(_ body: [UInt8]) -> Result<OsmAndRequest, HTTPError> {
        do {
            let request = try JSONCoding.decoder.decode(JSONBody.self, from: Data(body))
            guard !request.device_id.isEmpty else { return .failure(.badInput("device_id: required (the device identifier)")) }
            let fixes = try request.location.map { location -> DeviceFix in
                guard let time = ISO8601.seconds(location.timestamp) else {
                    throw HTTPError.badInput("location.timestamp: '\(location.timestamp.prefix(40))' is not an ISO 8601 time with a zone")
                }
                let c = location.coords
                return DeviceFix(t: time, lat: c.latitude, lon: c.longitude,
                                 acc: c.accuracy.flatMap { $0 > 0 ? $0 : nil } ?? defaultAccuracyM, speed: c.speed, course: c.heading,
                                 alt: c.altitude, mock: location.mock, batt: location.battery?.level.flatMap { $0 < 0 ? nil : $0 * 100 })
            }
            guard !fixes.isEmpty else { return .failure(.badInput("location: an empty list, no fix in it")) }
            return .success(OsmAndRequest(id: request.device_id, fixes: fixes))
        } catch let error as HTTPError {
            return .failure(error)
        } catch let error as DecodingError {
            return .failure(.badInput(DecodingErrorText.describe(error)))
        } catch {
            return .failure(.badInput("body: not JSON"))
        }
    }

    struct JSONBody: Decodable {
        var device_id: String
        var location: [Location]
        enum CodingKeys: String, CodingKey { case device_id, location }
        init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            device_id = try c.decode(String.self, forKey: .device_id)
            // One location, or a batch of them (the plugin's batch sync).
            if let list = try? c.decode([Location].self, forKey: .location) { location = list } else {
                location = [try c.decode(Location.self, forKey: .location)]
            }
        }
    }

    struct Location: Decodable {
        var timestamp: String
        var coords: Coords
        var battery: Battery?
        var mock: Bool?
    }

    struct Coords: Decodable {
        var latitude: Double
        var longitude: Double
        var accuracy: Double?
        var speed: Double?
        var heading: Double?
        var altitude: Double?
    }

    struct Battery: Decodable { var level: Double? }

    static func number(_ p: [String: String], _ name: String) throws -> Double? {
        guard let text = p[name], !text.isEmpty else { return nil }
        guard let value = Double(text), value.isFinite else { throw HTTPError.badInput("\(name): '\(text.prefix(40))' is not a number") }
        return value
    }

    /// Seconds since 1970 from seconds, milliseconds (a number past 2³¹, as Traccar tells them) or ISO 8601.
    static func seconds(_ text: String) throws -> Double {
        if let value = Double(text), value.isFinite { return value > Double(Int32.max) ? value / 1000 : value }
        if let time = ISO8601.seconds(text) { return time }
        throw HTTPError.badInput("timestamp: '\(text.prefix(40))' is neither seconds, milliseconds nor an ISO 8601 time with a zone")
    }
}

/// ISO 8601 times with a zone (`2026-10-01T10:00:00Z`, `…T12:00:00.250+02:00`).
public enum ISO8601 {
    public static func seconds(_ text: String) -> Double? {
        for options: ISO8601DateFormatter.Options in [[.withInternetDateTime, .withFractionalSeconds], [.withInternetDateTime]] {
            let formatter = ISO8601DateFormatter()
            formatter.formatOptions = options
            if let date = formatter.date(from: text) { return date.timeIntervalSince1970 }
        }
        return nil
    }
}
