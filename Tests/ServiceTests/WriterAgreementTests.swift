@testable import FilterCore
import Foundation
import Model
import TestSupport
import Testing
import TrackCore
@testable import Track

/// Every type with a hand-written JSON writer writes what Foundation's
/// encoder writes for it: the same keys and the same values, optionals
/// present and absent. A field added to a type but not to its writer fails
/// here, and so does a writer type this list does not cover.
@Suite struct WriterAgreementTests {
    /// One sample: its type's name, the writer's bytes and Foundation's.
    struct Sample {
        let type: String
        let written: Data
        let foundation: Data
        init<T: Encodable & JSONWritable>(_ value: T) {
            type = String(describing: T.self)
            var w = JSONWriter()
            value.write(to: &w)
            written = Data(w.bytes)
            foundation = JSONCoding.foundation(value)
        }
    }

    static let device = DeviceID("van-7.a_b")!
    static let point = TrackPoint(seq: 3, sessionID: "s-1", timeMs: 1_793_197_938_549, latitude: 48.137154, longitude: 11.576124,
                                  accuracyM: 7.825587755538549, speedMps: 13.2, courseDeg: 263.6, odometerM: 1234.5678)
    static let bare = TrackPoint(seq: 1, sessionID: nil, timeMs: 9, latitude: -33.9, longitude: 151.2, accuracyM: 0, odometerM: 0)
    static let reading = Reading(latitude: 1.5, longitude: -2, accuracyM: 12.25, speedMps: 3, courseDeg: 90, altitudeM: 512.5, batteryPct: 81)

    static var samples: [Sample] {
        let trip = Trip(startMs: 1, startLatitude: 1, startLongitude: 2, startOdometerM: 3, sessionID: "s")
        let judgement = Judgement(decision: Decision(seq: 7, timeMs: 9, accepted: false, reason: "isolated_jump",
                                                     estimate: Estimate(latitude: 1, longitude: 2, accuracyM: 3), measured: 412.5, limit: 150),
                                  judged: JudgedPoint(fix: FilterInput(seq: 7, sessionID: "s", timeMs: 9, latitude: 1, longitude: 2, accuracyM: 3,
                                                                       speedMps: 4, courseDeg: 5, receivedMs: 10),
                                                      accepted: false, reason: "isolated_jump"),
                                  point: nil, announceRejection: true)
        var samples = [
            Sample(device), Sample(FixSource.ownTracks), Sample(MotionState.stopPending), Sample(Crossing.Kind.dwell), Sample(RegionTransition.Kind.leave),
            Sample(RegionTransition(region: "Home \"sweet\" ☃", event: .enter, timeMs: 1_793_197_938_000, latitude: 48.137, longitude: 11.575,
                                    accuracyM: 12.5, regionID: "6da9cf", trigger: "c")),
            Sample(RegionTransition(region: "r", event: .leave, timeMs: 5)),
            Sample(RawFix(device: device, seq: 42, sessionID: "s-1", timeMs: 1_793_197_938_549, receivedMs: 1_795_985_074_064,
                          source: .ownTracks, latitude: 37.331821, longitude: -122.030386, accuracyM: 10.5, speedMps: 1.54,
                          courseDeg: 263.6, altitudeM: -3.25, verticalAccuracyM: 4, mock: true, batteryPct: 77, epoch: "e", prev: 41)),
            Sample(RawFix(device: device, seq: 1, sessionID: nil, timeMs: 1, receivedMs: 2, source: .device, latitude: 0, longitude: 0, accuracyM: 0)),
            Sample(DeviceFix(t: 1_793_197_938.25, lat: 48.137, lon: -11.575, acc: 6, speed: 5.144, course: 90.5, alt: 520, vacc: 3, mock: true, batt: 81.5)),
            Sample(DeviceFix(t: 1, lat: 0, lon: 0, acc: 0)),
            Sample(PointMessage(device: device, point: bare, receivedMs: 7)),
            Sample(point), Sample(bare),
            Sample(PointMessage(device: device, point: point, epoch: "e", measured: reading, prev: 2)),
            Sample(PointMessage(device: device, point: bare)),
            Sample(MotionMessage(device: device, seq: 5, timeMs: 9, state: .moving, epoch: "e", prev: 4)),
            Sample(MotionMessage(device: device, seq: 1, timeMs: 9, state: .stationary)),
            Sample(reading), Sample(Reading(latitude: 1, longitude: 2, accuracyM: 3)),
            Sample(Estimate(latitude: 1.5, longitude: 2.25, accuracyM: 3, speedMps: 4)), Sample(Estimate(latitude: 1, longitude: 2, accuracyM: 3)),
            Sample(Decision(seq: 4, timeMs: 9, accepted: false, reason: "implied_speed", estimate: Estimate(latitude: 1, longitude: 2, accuracyM: 3),
                            measured: 123.456, limit: 80)),
            Sample(Decision(seq: 5, timeMs: 10, accepted: true, reason: "accepted", estimate: nil)),
            Sample(Session(id: "abc", device: device, tag: "route \"7\"\n\t\\ ünï", startMs: 1, endMs: 2, auto: false)),
            Sample(Session(id: "abc", device: device, tag: nil, startMs: 1)),
            Sample(JSONValue.object(["a": .array([.number(1.5), .string("x"), .bool(true), .null]), "b": .object([:])])),
            Sample(Crossing(geofenceID: "home", kind: .exit, timeMs: 6, latitude: 1, longitude: 2, interpolated: true, fleet: true)),
            Sample(Crossing(geofenceID: "home", kind: .enter, timeMs: 5, latitude: 1, longitude: 2)),
            Sample(Geofence(id: "home", latitude: 1, longitude: 2, radiusM: 150, notifyOnExit: false, dwellAfterMs: 60_000)),
            Sample(Stop(arrivalMs: 1, departureMs: 90_001, latitude: 1, longitude: 2)),
            Sample(TripReport(trip)),
            Sample(JudgedPoint(fix: FilterInput(seq: 7, sessionID: "s", timeMs: 9, latitude: 1, longitude: 2, accuracyM: 3, speedMps: 4,
                                                courseDeg: 5, receivedMs: 10), accepted: false, reason: "isolated_jump")),
            Sample(JudgedPoint(fix: FilterInput(seq: 7, sessionID: nil, timeMs: 9, latitude: 1, longitude: 2, accuracyM: 3),
                               accepted: true, reason: "accepted")),
            Sample(LoggedJudgement(judgement, decision: true, point: true)),
            Sample(LoggedJudgement(judgement, decision: true, point: false)),
            Sample(LoggedJudgement(judgement, decision: false, point: true)),
            Sample(LiveSession(id: "s", startMs: 1, distanceM: 2, durationSec: 3, points: 4, maxSpeedMps: 5)),
            Sample(LiveFrame(device: device, timeMs: 9, latitude: 48.137154, longitude: 11.576124, accuracyM: 7.5, speedMps: 13.2,
                             headingDeg: 263.6, motion: .moving, tail: [[48.1, 11.5], [48.137154, 11.576124]],
                             session: LiveSession(id: "s", startMs: 1, distanceM: 2.5, durationSec: 3, points: 4, maxSpeedMps: 5))),
            Sample(LiveFrame(device: device, timeMs: 1, latitude: 0, longitude: 0, accuracyM: 0, speedMps: nil, headingDeg: nil,
                             motion: nil, tail: [], session: nil)),
            Sample(StoredBody(StoredPoint(point: point, measured: reading))), Sample(StoredBody(StoredPoint(point: bare))),
        ]
        let bodies: [Event.Body] = [
            .location(point), .locationRejected(Decision(seq: 4, timeMs: 9, accepted: false, reason: "stale", estimate: nil)),
            .sessionStarted(Session(id: "s", device: device, tag: "t", startMs: 1)), .trackingGap(durationSec: 600.5, distanceMeters: 300),
            .diagnostic(code: "ignored", message: "m"), .error(code: "badInput", message: "e"),
            .streamGap(StreamGap(stream: "raw", from: 3, to: 9, reason: .trimmed)), .motionChange(.moving, point: nil),
            .activityChange(activity: "walking", confidence: 5), .heartbeat(point: nil),
            .geofenceAdded(Geofence(id: "g", latitude: 1, longitude: 2, radiusM: 3)), .geofenceRemoved(id: "g", fleet: nil),
            .geofence(Crossing(geofenceID: "g", kind: .dwell, timeMs: 1, latitude: 1, longitude: 2)), .tripEnded(trip),
            .regionTransition(RegionTransition(region: "Home", event: .leave, timeMs: 9, latitude: 1, longitude: 2, accuracyM: 3, regionID: "x", trigger: "c")),
            .regionTransition(RegionTransition(region: "Home", event: .enter, timeMs: 9)),
            .stopEnded(Stop(arrivalMs: 1, departureMs: 2, latitude: 1, longitude: 2)), .offRoute(point: point, distanceM: 1),
            .onRoute(point: nil, distanceM: 2), .httpResponse(statusCode: 503, count: 2), .httpResponse(statusCode: nil, count: 0),
            .uploaded(count: 3), .retryScheduled(afterSec: 1.5, reason: "r"), .authExpired,
            .other(type: "future", fields: ["z": .number(1), "a": .string("b")]),
        ]
        samples += bodies.map { Sample(Event(device: device, timeMs: 77, $0)) }
        return samples
    }

    @Test func everyWriterWritesWhatFoundationWrites() throws {
        for sample in Self.samples {
            let written = try JSONSerialization.jsonObject(with: sample.written, options: .fragmentsAllowed) as? NSObject
            let foundation = try JSONSerialization.jsonObject(with: sample.foundation, options: .fragmentsAllowed) as? NSObject
            #expect(written != nil && written == foundation,
                    "\(sample.type): writer \(String(decoding: sample.written, as: UTF8.self)) ≠ Foundation \(String(decoding: sample.foundation, as: UTF8.self))")
        }
    }

    /// Every type the sources give a writer is among the samples.
    @Test func everyWriterTypeIsCovered() throws {
        let covered = Set(Self.samples.map(\.type))
        var declared: Set<String> = []
        let pattern = try NSRegularExpression(pattern: #"(?:extension|struct|enum|final class|class)\s+([A-Za-z][A-Za-z0-9.]*)\s*:[^{]*\bJSONWritable\b"#)
        for folder in ["Shared", "Services"] {
            let root = Repository.root.appendingPathComponent(folder)
            for case let url as URL in FileManager.default.enumerator(at: root, includingPropertiesForKeys: nil)! where url.pathExtension == "swift" {
                let text = try String(contentsOf: url, encoding: .utf8)
                for match in pattern.matches(in: text, range: NSRange(text.startIndex..., in: text)) {
                    guard let range = Range(match.range(at: 1), in: text) else { continue }
                    let name = String(text[range])
                    if name != "RowCodec" { declared.insert(name.split(separator: ".").last.map(String.init) ?? name) }
                }
            }
        }
        #expect(!declared.isEmpty)
        let missing = declared.subtracting(covered.map { $0.split(separator: ".").last.map(String.init) ?? $0 })
        #expect(missing.isEmpty, "writer types without a sample here: \(missing.sorted())")
    }
}
