import FoundationEssentials
import Model
import OutboundHTTP
import Runtime
import TrackCore

/// `buildTrack {sessionID, options?}` and the exports built from it.
struct BuildArgs: Decodable {
    var sessionID: String
    var options: TrackOptions?
}

enum Exports {
    static func track(_ command: IncomingCommand, _ query: QueryContext, _ settings: TrackSettings) throws -> Track {
        let args = try command.arguments(BuildArgs.self)
        let points = try TrackStore.session(query.db, device: query.device, sessionID: args.sessionID)
        guard !points.isEmpty else { throw CommandError(.notFound, "no stored points for session '\(args.sessionID.prefix(80))' of \(query.device)") }
        let track = TrackBuilder(options: args.options ?? TrackOptions()).build(points, device: query.device, sessionID: args.sessionID)
        guard let snapper = settings.roadSnap else { return track }
        return snapper.snap(track) { url in
            let response = HTTPClient.send(method: "GET", url: url, timeoutMs: settings.roadSnapTimeoutMs)
            guard let status = response.statusCode else { return .failure(SnapError(response.failure ?? "no answer")) }
            // OSRM answers a failed match with 400 and a JSON code: let the parser name it.
            return status == 200 || status == 400 ? .success(response.body) : .failure(SnapError("HTTP \(status)"))
        }
    }

    // MARK: GeoJSON (RFC 7946)

    /// A FeatureCollection: moving and gap segments as LineStrings ([lon, lat]),
    /// stops and arrows as Points, each with its properties.
    static func geoJSON(_ track: Track) -> JSONValue {
        func position(_ lat: Double, _ lon: Double) -> JSONValue { .array([.number(lon), .number(lat)]) }
        func feature(_ geometry: JSONValue, _ properties: [String: JSONValue]) -> JSONValue {
            .object(["type": .string("Feature"), "geometry": geometry, "properties": .object(properties)])
        }
        var features: [JSONValue] = []
        for (i, segment) in track.segments.enumerated() {
            var properties: [String: JSONValue] = ["kind": .string(segment.kind.rawValue), "segment": .number(Double(i)),
                                                   "startMs": .number(Double(segment.startMs)), "endMs": .number(Double(segment.endMs))]
            switch segment.kind {
            case .moving, .gap:
                if let band = segment.speedBand { properties["speedBand"] = .string(band.rawValue) }
                if let v = segment.averageSpeedMps { properties["averageSpeedMps"] = .number(v) }
                if segment.kind == .moving { properties["distanceM"] = .number(segment.distanceM) }
                if let d = segment.gapDistanceM { properties["gapDistanceM"] = .number(d) }
                features.append(feature(.object(["type": .string("LineString"),
                                                 "coordinates": .array(segment.vertices.map { position($0.latitude, $0.longitude) })]), properties))
                for arrow in segment.arrows ?? [] {
                    features.append(feature(.object(["type": .string("Point"), "coordinates": position(arrow.latitude, arrow.longitude)]),
                                            ["kind": .string("arrow"), "bearingDeg": .number(arrow.bearingDeg), "segment": .number(Double(i))]))
                }
            case .stop:
                guard let stop = segment.stop else { continue }
                properties["arrivalMs"] = .number(Double(stop.arrivalMs))
                properties["departureMs"] = .number(Double(stop.departureMs))
                properties["durationSec"] = .number(stop.durationSec)
                features.append(feature(.object(["type": .string("Point"), "coordinates": position(stop.latitude, stop.longitude)]), properties))
            }
        }
        return .object(["type": .string("FeatureCollection"), "features": .array(features)])
    }

    // MARK: Encoded polylines

    /// The Track with each segment's line as an encoded polyline (Google's
    /// algorithm, precision 5: 1e-5 degrees, about a metre), `[lat, lon]` order.
    static func polylineJSON(_ track: Track) throws -> JSONValue {
        var value = try JSONValue(encoding: track)
        guard case .object(var fields) = value, case .array(let segments)? = fields["segments"] else { return value }
        fields["segments"] = .array(zip(segments, track.segments).map { json, segment in
            guard case .object(var s) = json else { return json }
            s["vertices"] = nil
            s["polyline"] = .string(Polyline.encode(segment.vertices.map { ($0.latitude, $0.longitude) }))
            s["polylinePrecision"] = .number(5)
            return .object(s)
        })
        value = .object(fields)
        return value
    }

    // MARK: GPX 1.1

    /// A `trkseg` per moving segment, a `wpt` per stop.
    static func gpx(_ track: Track) -> String {
        func time(_ ms: Int64) -> String {
            // xsd:dateTime in UTC, with milliseconds: 2026-11-30T12:00:00.123Z.
            Date.ISO8601FormatStyle(includingFractionalSeconds: true).format(Date(timeIntervalSince1970: Double(ms) / 1000))
        }
        func coordinate(_ v: Double) -> String { v.fixed(7) }
        var xml = """
            <?xml version="1.0" encoding="UTF-8"?>
            <gpx version="1.1" creator="Tracker" xmlns="http://www.topografix.com/GPX/1/1" \
            xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" \
            xsi:schemaLocation="http://www.topografix.com/GPX/1/1 http://www.topografix.com/GPX/1/1/gpx.xsd">

            """
        for (i, segment) in track.segments.enumerated() where segment.kind == .stop {
            guard let stop = segment.stop else { continue }
            xml += "  <wpt lat=\"\(coordinate(stop.latitude))\" lon=\"\(coordinate(stop.longitude))\"><time>\(time(stop.arrivalMs))</time>"
                + "<name>stop \(i)</name><desc>\(Int(stop.durationSec.rounded())) s</desc><type>stop</type></wpt>\n"
        }
        xml += "  <trk><name>\(TrackPicture.escaped("\(track.device) \(track.sessionID ?? "")"))</name>\n"
        for segment in track.segments where segment.kind == .moving {
            xml += "    <trkseg>\n"
            for v in segment.vertices {
                xml += "      <trkpt lat=\"\(coordinate(v.latitude))\" lon=\"\(coordinate(v.longitude))\"><time>\(time(v.timeMs))</time></trkpt>\n"
            }
            xml += "    </trkseg>\n"
        }
        xml += "  </trk>\n</gpx>\n"
        return xml
    }
}

/// Google's encoded polyline algorithm.
enum Polyline {
    static func encode(_ points: [(lat: Double, lon: Double)], precision: Double = 1e5) -> String {
        var result = [UInt8](), lastLat = 0, lastLon = 0
        func append(_ value: Int) {
            var v = value < 0 ? ~(value << 1) : value << 1
            while v >= 0x20 {
                result.append(UInt8((0x20 | (v & 0x1f)) + 63))
                v >>= 5
            }
            result.append(UInt8(v + 63))
        }
        for p in points {
            let lat = Int((p.lat * precision).rounded()), lon = Int((p.lon * precision).rounded())
            append(lat - lastLat); append(lon - lastLon)
            lastLat = lat; lastLon = lon
        }
        return String(decoding: result, as: UTF8.self)
    }
}
