import Foundation
import HTTPCore
import Model
import Testing

@Suite struct OsmAndTests {
    let now: Int64 = 1_800_000_000_000

    func parse(_ query: String) -> Result<OsmAndRequest, HTTPError> {
        OsmAndRequest.parse(HTTPRequest(method: "POST", path: "/", query: FormParameters.parse(query)), nowMs: now)
    }

    @Test func traccarClientsParametersBecomeADeviceFix() throws {
        let request = try parse("id=van7&timestamp=1793197938&lat=48.137&lon=11.575&speed=10&bearing=90.5&altitude=520&accuracy=6&batt=81.5&charge=true").get()
        #expect(request.id == "van7")
        let fix = try #require(request.fixes.first)
        #expect(fix.t == 1_793_197_938 && fix.lat == 48.137 && fix.lon == 11.575 && fix.course == 90.5 && fix.alt == 520 && fix.acc == 6 && fix.batt == 81.5)
        #expect(abs((fix.speed ?? 0) - 5.14444) < 1e-9, "knots to m/s")
    }

    @Test func timestampsComeInSecondsMillisecondsOrISO() throws {
        for (text, seconds) in [("1793197938", 1_793_197_938.0), ("1793197938250", 1_793_197_938.25),
                                ("2026-10-01T10:00:00Z", 1_790_848_800.0), ("2026-10-01T12:00:00.500%2B02:00", 1_790_848_800.5)] {
            #expect(try parse("id=a&lat=1&lon=2&timestamp=\(text)").get().fixes[0].t == seconds, "\(text)")
        }
        // None: now, as Traccar reads it.
        #expect(try parse("id=a&lat=1&lon=2").get().fixes[0].t == Double(now) / 1000)
    }

    @Test func accuracyZeroOrAbsentIsTheDocumentedDefaultAndHdopCounts() throws {
        #expect(try parse("id=a&lat=1&lon=2&accuracy=0").get().fixes[0].acc == OsmAndRequest.defaultAccuracyM)
        #expect(try parse("id=a&lat=1&lon=2").get().fixes[0].acc == OsmAndRequest.defaultAccuracyM)
        #expect(try parse("id=a&lat=1&lon=2&hdop=1.5").get().fixes[0].acc == 7.5)
        #expect(try parse("id=a&location=48.1,11.5").get().fixes[0].lat == 48.1)
        #expect(try parse("id=a&lat=1&lon=2&speed=-1").get().fixes[0].speed == -1, "unknown stays negative: the gateway drops it")
    }

    @Test func badParametersAreNamed() {
        for (query, message) in [("lat=1&lon=2", "id: required (the device identifier)"), ("id=a&lon=2", "lat: required"),
                                 ("id=a&lat=north&lon=2", "lat: 'north' is not a number"), ("id=a&location=1", "location: expected 'lat,lon', got '1'"),
                                 ("id=a&lat=1&lon=2&timestamp=yesterday", "timestamp: 'yesterday' is neither seconds, milliseconds nor an ISO 8601 time with a zone"),
                                 ("id=a&lat=1&lon=2&valid=false", "valid: the app marked this fix invalid; not tracked")] {
            #expect(parse(query) == .failure(.badInput(message)), "\(query)")
        }
    }

    @Test func theFlutterAppsJSONBodyIsRead() throws {
        let body = #"{"location":{"timestamp":"2026-10-01T10:00:00.250Z","coords":{"latitude":48.1,"longitude":11.5,"accuracy":4,"speed":3.5,"heading":-1,"altitude":500},"is_moving":true,"battery":{"level":0.42,"is_charging":false},"activity":{"type":"in_vehicle"}},"device_id":"van7~secret"}"#
        let request = HTTPRequest(method: "POST", path: "/", headers: ["content-type": "application/json; charset=utf-8"], body: Array(body.utf8))
        let parsed = try OsmAndRequest.parse(request, nowMs: now).get()
        #expect(parsed.id == "van7~secret")
        #expect(parsed.fixes == [DeviceFix(t: 1_790_848_800.25, lat: 48.1, lon: 11.5, acc: 4, speed: 3.5, course: -1, alt: 500, batt: 42)])
        let batch = #"{"location":[{"timestamp":"2026-10-01T10:00:00Z","coords":{"latitude":1,"longitude":2}},{"timestamp":"2026-10-01T10:00:01Z","coords":{"latitude":1,"longitude":2}}],"device_id":"a"}"#
        #expect(try OsmAndRequest.parse(HTTPRequest(method: "POST", path: "/", headers: ["content-type": "application/json"], body: Array(batch.utf8)), nowMs: now).get().fixes.count == 2)
        let noZone = #"{"location":{"timestamp":"2026-10-01T10:00:00","coords":{"latitude":1,"longitude":2}},"device_id":"a"}"#
        #expect(OsmAndRequest.parse(HTTPRequest(method: "POST", path: "/", headers: ["content-type": "application/json"], body: Array(noZone.utf8)), nowMs: now)
                == .failure(.badInput("location.timestamp: '2026-10-01T10:00:00' is not an ISO 8601 time with a zone")))
    }

    @Test func aFormBodyIsReadWhenTheQueryIsEmpty() throws {
        let request = HTTPRequest(method: "POST", path: "/", headers: ["content-type": "application/x-www-form-urlencoded"], body: Array("id=a&lat=1&lon=2".utf8))
        #expect(try OsmAndRequest.parse(request, nowMs: now).get().fixes[0].lon == 2)
    }
}

@Suite struct RouteTests {
    func route(_ path: String, _ query: [String: String] = [:], method: String = "GET") -> Result<APIRoute, HTTPError> {
        APIRoute.match(HTTPRequest(method: method, path: path, query: query))
    }

    @Test func everyRouteIsFound() {
        let van = DeviceID("van7")!
        #expect(route("/", method: "POST") == .success(.osmAnd) && route("/", method: "GET") == .success(.osmAnd))
        #expect(route("/pub", method: "POST") == .success(.ownTracksPublish) && route("/health") == .success(.health))
        #expect(route("/api/v1/devices") == .success(.devices) && route("/api/v1/devices/van7") == .success(.device(van)))
        #expect(route("/api/v1/devices/van7/trips", ["from": "1000", "to": "2026-10-01T10:00:00Z", "limit": "5"])
                == .success(.query(van, .trips, args: ["fromMs": .number(1000), "toMs": .number(1_790_848_800_000), "limit": .number(5)])))
        #expect(route("/api/v1/devices/van7/geofence-events") == .success(.query(van, .geofenceEvents, args: [:])))
        #expect(route("/api/v1/devices/van7/sessions/s1/track.gpx") == .success(.track(van, session: "s1", format: .gpx)))
        #expect(route("/api/v1/devices/van7/sessions/s1/track", ["format": "geojson"]) == .success(.track(van, session: "s1", format: .geojson)))
        #expect(route("/api/v1/events", ["device": "van7"]) == .success(.events(van)))
    }

    @Test func whatIsNoRouteIsSaid() {
        #expect((try? route("/api/v1/devices/../../etc/passwd").get()) == nil)
        #expect(route("/api/v1/devices/../x").failureStatus == 404)
        #expect(route("/nothing").failureStatus == 404)
        #expect(route("/api/v1/devices", method: "DELETE").failureStatus == 405)
        #expect(route("/api/v1/devices/bad id").failureStatus == 400)
        #expect(route("/api/v1/devices/van7/summary").failureStatus == 400, "summary needs from and to")
        #expect(route("/api/v1/devices/van7/trips", ["evil": "1"]).failureStatus == 400)
        #expect(route("/api/v1/devices/van7/trips", ["from": "yesterday"]).failureStatus == 400)
        #expect(route("/api/v1/devices/van7/sessions/s1/track.kml").failureStatus == 400)
    }
}

extension Result where Failure == HTTPError {
    var failureStatus: Int? { if case .failure(let e) = self { e.status } else { nil } }
}

@Suite struct GateTests {
    @Test func basicCredentialsAreReadAndAnythingElseIsNone() {
        let header = "Basic " + Data("jane@example.com:pa:ss".utf8).base64EncodedString()
        #expect(Credentials.basic(header) == .account(username: "jane@example.com", password: "pa:ss"))
        #expect(Credentials.basic("Bearer x") == nil && Credentials.basic("Basic !!!") == nil && Credentials.basic(nil) == nil)
        #expect(Credentials.basic("Basic " + Data(":pw".utf8).base64EncodedString()) == nil)
    }

    @Test func anIngestTokenNamesItsDeviceAndAPlainNameIsNone() {
        let secret = String(repeating: "Ab3_-", count: 7)
        #expect(IngestToken.parse("van.7~\(secret)") == .ingestToken(device: DeviceID("van.7")!, secret: secret))
        #expect(IngestToken.parse("van.7~\(secret)")?.username == "ingest.van.7")
        for id in ["van7", "van7~short", "bad id~\(secret)", "van7~\(secret)!"] { #expect(IngestToken.parse(id) == nil, "\(id)") }
    }

    @Test func wrongLoginsAreThrottledPerAddressForAWindow() {
        var throttle = LoginThrottle(limit: 3, windowMs: 60_000)
        for t in [0, 1_000, 2_000] as [Int64] {
            #expect(throttle.check("10.0.0.1", nowMs: t) == nil)
            throttle.failed("10.0.0.1", nowMs: t)
        }
        #expect(throttle.check("10.0.0.1", nowMs: 3_000) == 57_000)
        #expect(throttle.check("10.0.0.2", nowMs: 3_000) == nil, "another address is not held")
        #expect(throttle.check("10.0.0.1", nowMs: 60_001) == nil, "the oldest failure left the window")
        throttle.succeeded("10.0.0.1")
        #expect(throttle.check("10.0.0.1", nowMs: 60_002) == nil)
    }

    @Test func aCommandsFailureCodeHasItsStatus() {
        #expect(HTTPError.status(of: .notFound) == 404 && HTTPError.status(of: .forbidden) == 403 && HTTPError.status(of: .busy) == 503
                && HTTPError.status(of: .badInput) == 400 && HTTPError.status(of: .timeout) == 504 && HTTPError.status(of: .limitReached) == 429)
        let response = HTTPError.unauthorized.response
        #expect(response.status == 401 && response.headers.contains { $0.0 == "WWW-Authenticate" })
        #expect(String(decoding: response.body, as: UTF8.self).contains(#""code":"unauthorized""#))
    }
}
