@testable import Ctl
import Foundation
import Model
import TestSupport
import Testing
@testable import Track
import TrackCore

/// `trackerctl replay FILE.gpx`'s reader on files in the shapes other tools
/// write (Fixtures/gpx/, see Fixtures/README.md) and on the project's own export.
@Suite struct GPXImportTests {
    /// 2024-05-01T10:00:00Z, the fixtures' first time.
    let t0 = 1_714_557_600.0

    func read(_ name: String) throws -> Recording {
        try Recording.gpx(try Data(contentsOf: Fixtures.url("gpx/\(name)")))
    }

    func fixes(_ recording: Recording) throws -> [DeviceFix] {
        try recording.lines.map { try JSONCoding.decoder.decode(DeviceFix.self, from: Data($0.payload.utf8)) }
    }

    func failure(_ name: String) -> String? {
        do { _ = try read(name); return nil } catch { return "\(error)" }
    }

    @Test func gpsbabelGPX10KeepsSpeedCourseAndItsTwoTracks() throws {
        let recording = try read("gpsbabel-1.0.gpx")
        let f = try fixes(recording)
        #expect(f.count == 7)  // the untimed START <wpt> is not one
        #expect(f.first?.t == t0 && f.first?.alt == 519 && abs((f.first?.acc ?? 0) - 5.5) < 1e-9)  // hdop 1.1 × 5 m
        #expect(f.prefix(4).allSatisfy { $0.speed == 1.35 && $0.course == 87.3 })
        #expect(f.suffix(3).allSatisfy { $0.speed == 1.2 && $0.course == 180 })
        #expect(recording.lines.map(\.track) == [0, 0, 0, 0, 1, 1, 1])
        #expect(recording.tracks.map(\.name) == ["ACTIVE LOG", "ACTIVE LOG #2"])
        #expect(recording.notes == ["GPX: 1 waypoint(s) (<wpt>) left out: waypoints are not fixes"])
        #expect(!f.contains { $0.lat == 48.137154 && $0.t != t0 })
    }

    @Test func garminTrackPointExtensionSpeedAndCourseAndTwoSegments() throws {
        let recording = try read("garmin-edge-1.1.gpx")
        let f = try fixes(recording)
        #expect(f.count == 6)
        #expect(f.map(\.speed) == [4.2, 4.21, 4.22, 4.4, 4.41, 4.42])
        #expect(f.map(\.course) == [45, 45, 45, 46.5, 46.5, 46.5])
        #expect(f.map(\.t) == [t0, t0 + 1, t0 + 2, t0 + 180, t0 + 181, t0 + 182])  // neither the metadata's nor the <wpt>'s time
        #expect(recording.lines.map(\.segment) == [0, 0, 0, 1, 1, 1])
        #expect(recording.tracks == [GPXTrack(index: 0, name: "2024-05-01 12:00:00", type: nil, segments: 2)])
        #expect(f.allSatisfy { $0.acc == 10 && $0.alt != nil })
    }

    @Test func stravaExport() throws {
        let recording = try read("strava-1.1.gpx")
        let f = try fixes(recording)
        #expect(f.map(\.t) == [t0, t0 + 2, t0 + 4, t0 + 6, t0 + 8])  // the metadata <time> is not a fix
        #expect(f.allSatisfy { $0.speed == nil && $0.course == nil })  // Strava writes neither
        #expect(f.first?.alt == 519.4 && f.first?.lat == 48.137154 && f.first?.lon == 11.576124)
        #expect(recording.tracks == [GPXTrack(index: 0, name: "Morning Run", type: "running", segments: 1)])
        #expect(recording.notes.isEmpty)
    }

    @Test func anyNamespacePrefixAndCluetrustSpeed() throws {
        let f = try fixes(try read("prefixed-cluetrust.gpx"))
        #expect(f.count == 4)
        #expect(f.map(\.speed) == [6.0, 6.1, 6.2, 6.3] && f.allSatisfy { $0.course == 10 && $0.acc == 4 })
        #expect(f.map(\.alt) == [521, 522, 523, 524])
    }

    @Test func zonelessTimesAreUTCAndSaidOnce() throws {
        let recording = try read("zoneless-times.gpx")
        #expect(try fixes(recording).map(\.t) == [t0, t0 + 1.25, t0 + 2.5, t0 + 3])
        #expect(recording.notes == ["GPX: 4 of the <time>s have no time zone (e.g. 2024-05-01T10:00:00); read as UTC"])
    }

    @Test func waypointsWithoutTimeAreLeftOut() throws {
        let recording = try read("waypoints-without-time.gpx")
        let f = try fixes(recording)
        #expect(f.map(\.t) == [t0, t0 + 5, t0 + 10])
        #expect(!f.contains { $0.lat == 48.138 || $0.lat == 48.139 })
        #expect(f.allSatisfy { abs($0.acc - 6) < 1e-9 })
        #expect(recording.notes == ["GPX: 2 waypoint(s) (<wpt>) left out: waypoints are not fixes"])
    }

    @Test func aRouteOrATimelessTrackIsAnErrorThatSaysWhy() throws {
        let route = try #require(failure("route-only.gpx"))
        #expect(route.contains("only a route (<rte>, 4 points) and no track (<trk>)"), "\(route)")
        let timeless = try #require(failure("timeless-track.gpx"))
        #expect(timeless.contains("none of the 4 track points (<trkpt>) has a <time>"), "\(timeless)")
    }

    func inline(_ body: String) -> String? {
        let text = #"<?xml version="1.0"?><gpx version="1.1" xmlns="http://www.topografix.com/GPX/1/1">"# + body + "</gpx>"
        do { _ = try Recording.gpx(Data(text.utf8)); return nil } catch { return "\(error)" }
    }

    @Test func otherFilesThatCannotBeReplayedSayWhy() throws {
        let mixed = inline("""
            <trk><trkseg><trkpt lat="1" lon="2"><time>2024-05-01T10:00:00Z</time></trkpt>
            <trkpt lat="1" lon="2"></trkpt></trkseg></trk>
            """)
        #expect(mixed?.contains("1 of the 2 track points (<trkpt>) have no <time> (the first on line 2)") == true, "\(mixed ?? "")")
        let badTime = inline(#"<trk><trkseg><trkpt lat="1" lon="2"><time>yesterday</time></trkpt></trkseg></trk>"#)
        #expect(badTime?.contains("the <time> 'yesterday' is not an xsd:dateTime") == true, "\(badTime ?? "")")
        #expect(inline(#"<wpt lat="1" lon="2"/>"#)?.contains("only waypoints (<wpt>, 1) and no track") == true)
        #expect(inline("")?.contains("no track point") == true)
        #expect(inline(#"<trk><trkseg><trkpt lat="x" lon="2"/></trkseg></trk>"#)?.contains("numeric lat") == true)
        let kml = #"<?xml version="1.0"?><kml xmlns="http://www.opengis.net/kml/2.2"><trk><trkseg/></trk></kml>"#
        #expect(throws: Recording.Failure.self) { try Recording.gpx(Data(kml.utf8)) }
        let notXML = "<gpx><trk>"
        #expect(throws: Recording.Failure.self) { try Recording.gpx(Data(notXML.utf8)) }
    }

    @Test func eachTrackStartsWhereItsFirstFixIsTaggedByItsName() throws {
        #expect(try read("gpsbabel-1.0.gpx").trackStarts.map { "\($0.line) \($0.tag)" } == ["0 ACTIVE LOG", "4 ACTIVE LOG #2"])
        #expect(try read("garmin-edge-1.1.gpx").trackStarts.map(\.line) == [0])  // two segments, one track
        let unnamed = #"<gpx version="1.1"><trk><trkseg><trkpt lat="1" lon="2"><time>2024-05-01T10:00:00Z</time></trkpt></trkseg></trk>"#
            + #"<trk><trkseg/></trk><trk><trkseg><trkpt lat="1" lon="2"><time>2024-05-01T10:00:01Z</time></trkpt></trkseg></trk></gpx>"#
        #expect(try Recording.gpx(Data(unnamed.utf8)).trackStarts.map { "\($0.line) \($0.tag)" } == ["0 gpx track 1", "1 gpx track 3"])
        #expect(try Recording.load(path: Fixtures.url("city-run.jsonl").path).trackStarts.isEmpty)
    }

    @Test func xsdDateTimes() {
        #expect(XSDDateTime.parse("2024-05-01T10:00:00Z")! == (t0, true))
        #expect(XSDDateTime.parse("2024-05-01T12:30:00+02:30")! == (t0, true))
        #expect(XSDDateTime.parse("2024-05-01T05:00:00-05:00")! == (t0, true))
        #expect(XSDDateTime.parse("2024-05-01T10:00:00.123456Z")!.seconds - t0 - 0.123456 < 1e-6)
        #expect(XSDDateTime.parse("2024-05-01T10:00:00")! == (t0, false))
        #expect(XSDDateTime.parse("2024-04-30T24:00:00Z")!.seconds == t0 - 36_000)
        #expect(XSDDateTime.parse("1970-01-01T00:00:00Z")!.seconds == 0)
        #expect(XSDDateTime.parse("2000-02-29T00:00:00Z")!.seconds == 951_782_400)
        for bad in ["2024-05-01 10:00:00Z", "2024-05-01T10:00Z", "2024-13-01T10:00:00Z", "2023-02-29T10:00:00Z",
                    "2024-05-01T10:00:60Z", "2024-05-01T10:00:00.Z", "2024-05-01T10:00:00+2:00", "2024-05-01T10:00:00Zjunk", ""] {
            #expect(XSDDateTime.parse(bad) == nil, "\(bad)")
        }
    }

    /// The track service's export read back: the same points, in order, and
    /// its stop `<wpt>`s are not fixes.
    @Test func theProjectsOwnExportRoundTrips() throws {
        let frame = LocalFrame(originLat: 48.1, originLon: 11.5)
        let t0Ms: Int64 = 1_790_000_000_000
        var points: [StoredPoint] = []
        // A minute east at 10 m/s, five minutes still (a stop), a minute more.
        func add(_ t: Double, _ x: Double) {
            let (lat, lon) = frame.toGeo(x: x, y: 0)
            points.append(StoredPoint(point: TrackPoint(seq: Int64(points.count + 1), sessionID: "s1", timeMs: t0Ms + Int64(t * 1000),
                                                        latitude: lat, longitude: lon, accuracyM: 5, odometerM: x)))
        }
        for i in 0..<60 { add(Double(i) + 0.25, Double(i) * 10) }
        for i in 0..<30 { add(60 + Double(i) * 10, 600) }
        for i in 0..<60 { add(360 + Double(i), 600 + Double(i) * 10) }
        var options = TrackOptions()
        options.simplifyToleranceM = 0
        let track = TrackBuilder(options: options).build(points, device: DeviceID("van1")!, sessionID: "s1")
        let moving = track.segments.filter { $0.kind == .moving }
        #expect(track.segments.contains { $0.kind == .stop } && moving.count == 2)
        let recording = try Recording.gpx(Data(Exports.gpx(track).utf8))
        let back = try fixes(recording)
        let vertices = moving.flatMap(\.vertices)
        #expect(back.count == vertices.count && back.count > 100)
        for (fix, vertex) in zip(back, vertices) {
            #expect(fix.timeMs == vertex.timeMs && abs(fix.lat - vertex.latitude) < 1e-7 && abs(fix.lon - vertex.longitude) < 1e-7)
        }
        #expect(recording.lines.map(\.segment) == moving.enumerated().flatMap { i, s in Array(repeating: i, count: s.vertices.count) })
        #expect(recording.notes == ["GPX: 1 waypoint(s) (<wpt>) left out: waypoints are not fixes"])
    }
}
