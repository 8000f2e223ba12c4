import Foundation
import Model
import Testing

/// The direct writers must produce what JSONDecoder reads back to the same value.
@Suite struct JSONWriterTests {
    func roundTrips<T: Codable & JSONWritable & Equatable>(_ value: T) throws -> Bool {
        let data = JSONCoding.encode(value)  // the direct writer (overload)
        return try JSONCoding.decoder.decode(T.self, from: data) == value
    }

    let device = DeviceID("van-7.a_b")!

    @Test func rawFixesWithAndWithoutOptionals() throws {
        let full = RawFix(device: device, seq: 42, sessionID: "s-1", timeMs: 1_793_197_938_549, receivedMs: 1_795_985_074_064,
                          source: .ownTracks, latitude: 37.331821, longitude: -122.030386, accuracyM: 10.5,
                          speedMps: 1.54, courseDeg: 263.6, altitudeM: -3.25, verticalAccuracyM: 4, mock: true, batteryPct: 77)
        let bare = RawFix(device: device, seq: 1, sessionID: nil, timeMs: 1, receivedMs: 2, source: .device,
                          latitude: 0.000001, longitude: 1e-7, accuracyM: 0)
        #expect(try roundTrips(full))
        #expect(try roundTrips(bare))
    }

    @Test func pointsDecisionsSessions() throws {
        let point = TrackPoint(seq: 3, sessionID: nil, timeMs: 9, latitude: 48.137154, longitude: 11.576124,
                               accuracyM: 7.825587755538549, speedMps: 13.2, courseDeg: nil, odometerM: 1234.5678)
        #expect(try roundTrips(point))
        #expect(try roundTrips(PointMessage(device: device, point: point)))
        let decision = Decision(seq: 4, timeMs: 9, accepted: false, reason: "implied_speed",
                                estimate: Estimate(latitude: 1.5, longitude: 2.25, accuracyM: 3, speedMps: nil),
                                measured: 123.456, limit: 80)
        #expect(try roundTrips(decision))
        #expect(try roundTrips(Decision(seq: 5, timeMs: 10, accepted: true, reason: "accepted", estimate: nil)))
        #expect(try roundTrips(Session(id: "abc", device: device, tag: "route \"7\"\n\t\\ ünï", startMs: 1, endMs: 2, auto: false)))
        #expect(try roundTrips(Session(id: "abc", device: device, tag: nil, startMs: 1)))
    }

    @Test func everyEventBody() throws {
        let point = TrackPoint(seq: 3, sessionID: "s", timeMs: 9, latitude: 1, longitude: 2, accuracyM: 5, odometerM: 7)
        let bodies: [Event.Body] = [
            .location(point),
            .locationRejected(Decision(seq: 4, timeMs: 9, accepted: false, reason: "stale", estimate: nil, measured: 31, limit: 30)),
            .sessionStarted(Session(id: "s", device: device, tag: "t", startMs: 1)),
            .sessionStopped(Session(id: "s", device: device, tag: nil, startMs: 1, endMs: 5, auto: true)),
            .trackingGap(durationSec: 600.5, distanceMeters: 300),
            .diagnostic(code: "duplicateFix", message: "dropped 1 fix(es): 1793197938.500"),
            .error(code: "badInput", message: "lat: \u{01} control \"quoted\" \\ back"),
            .motionChange(.stopPending, point: point),
            .motionChange(.moving, point: nil),
            .activityChange(activity: "in_vehicle", confidence: 66),
            .heartbeat(point: point),
            .geofenceAdded(Geofence(id: "home", latitude: 1, longitude: 2, radiusM: 150, notifyOnExit: false, dwellAfterMs: 60_000)),
            .geofenceRemoved(id: "home", fleet: true),
            .geofence(Crossing(geofenceID: "home", kind: .enter, timeMs: 5, latitude: 1, longitude: 2)),
            .geofence(Crossing(geofenceID: "home", kind: .exit, timeMs: 6, latitude: 1, longitude: 2, interpolated: true, fleet: true)),
            .geofence(Crossing(geofenceID: "home", kind: .dwell, timeMs: 7, latitude: 1, longitude: 2)),
            .tripEnded(Trip(startMs: 1, startLatitude: 1, startLongitude: 2, startOdometerM: 3, sessionID: "s")),
            .stopEnded(Stop(arrivalMs: 1, departureMs: 90_001, latitude: 1, longitude: 2)),
            .offRoute(point: point, distanceM: 120),
            .onRoute(point: nil, distanceM: 3),
            .httpResponse(statusCode: 503, count: 200),
            .httpResponse(statusCode: nil, count: 1),
            .uploaded(count: 200),
            .retryScheduled(afterSec: 2.5, reason: "HTTP 503"),
            .authExpired,
            .other(type: "parcelDelivered", fields: ["crossing": .object(["geofenceID": .string("home"), "n": .number(2.5),
                                                                        "ok": .bool(true), "list": .array([.null, .number(-1)])])]),
        ]
        for body in bodies {
            let event = Event(device: device, timeMs: 1_793_197_938_549, body)
            #expect(try roundTrips(event), "\(event.type)")
            // The same fields as the Codable form writes.
            let written = try JSONCoding.decoder.decode(JSONValue.self, from: JSONCoding.encode(event))
            #expect(written == (try JSONValue(encoding: event)), "\(event.type)")
        }
    }

    @Test func outputIsPlainJSONWithSortedKeys() {
        let text = JSONCoding.string(Event(device: device, timeMs: 5, .error(code: "badInput", message: "x")))
        #expect(text == #"{"code":"badInput","device":"van-7.a_b","message":"x","timeMs":5,"type":"error"}"#)
    }
}
