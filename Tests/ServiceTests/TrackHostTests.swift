import Bus
import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif
import TrackerLog
import Model
@testable import Runtime
import TestSupport
import Testing
@testable import Track
import TrackCore

/// The track service's definition on the host, in process.
@Suite struct TrackHostTests {
    let bus = RecordingBus()
    let clock = ManualClock()
    let database = TemporaryDatabase("track")
    let frame = LocalFrame(originLat: 48.1, originLon: 11.5)
    let t0: Int64 = 1_790_000_000_000

    func host() throws -> ServiceHost<TrackRow> {
        try .inProcess(TrackService.definition(try TrackSettings(.test())), path: database.path, bus: bus, clock: clock)
    }

    func point(_ seq: Int64, t: Double, x: Double, odometer: Double, session: String = "s1") -> MQTTMessage {
        let (lat, lon) = frame.toGeo(x: x, y: 0)
        let p = TrackPoint(seq: seq, sessionID: session, timeMs: t0 + Int64(t * 1000), latitude: lat, longitude: lon,
                           accuracyM: 5, speedMps: 10, courseDeg: 90, odometerM: odometer)
        let m = MeasuredFix(latitude: lat, longitude: lon, accuracyM: 5, speedMps: 10, courseDeg: 90)
        return MQTTMessage(topic: "tracker/van1/points", payload: JSONCoding.bytes(PointMessage(device: DeviceID("van1")!, point: p, epoch: "f", measured: m)))
    }

    func query(_ track: ServiceHost<TrackRow>, _ name: String, _ args: String, device: String = "van1") throws -> CommandReply {
        bus.clear()
        track.receive(MQTTMessage(topic: "tracker/\(device)/cmd/\(name)", string: #"{"id":"\#(name)","args":\#(args)}"#))
        #expect(track.commit())
        let message = try #require(bus.waitForMessage { $0.topic == "tracker/\(device)/reply/\(name)" })
        return try JSONDecoder().decode(CommandReply.self, from: Data(message.payload))
    }

    /// A minute east at 10 m/s, 15 minutes dark, a minute more 2 km on.
    func drive(_ track: ServiceHost<TrackRow>) {
        for i in 0..<60 { track.receive(point(Int64(i + 1), t: Double(i), x: Double(i) * 10, odometer: Double(i) * 10)) }
        for i in 0..<60 {
            track.receive(point(Int64(i + 61), t: 960 + Double(i), x: 2_600 + Double(i) * 10, odometer: 2_600 + Double(i) * 10))
        }
    }

    @Test func pointsAreStoredOnceAndAGapIsAnnouncedOnce() throws {
        let track = try host()
        drive(track)
        // Redelivered after a reconnect: stored once.
        for i in 0..<10 { track.receive(point(Int64(i + 1), t: Double(i), x: Double(i) * 10, odometer: Double(i) * 10)) }
        #expect(track.commit())
        let gaps = bus.events().compactMap { if case .trackingGap(let d, let m) = $0.body { (d, m) } else { nil } }
        #expect(gaps.count == 1)
        #expect(gaps.first.map { (900...910).contains($0.0) && (2_000...2_020).contains($0.1) } == true)
        #expect(try query(track, "getCount", #"{"sessionID":"s1"}"#).result == .number(120))
        let odometer = try query(track, "getOdometer", #"{"sessionID":"s1"}"#).result?.doubleValue ?? 0
        // The odometer counts the gap's straight line; the built track's observed distance does not.
        let built = try query(track, "buildTrack", #"{"sessionID":"s1"}"#)
        let t = try JSONDecoder().decode(Track.self, from: JSONEncoder().encode(try #require(built.result)))
        #expect(t.segments.map(\.kind) == [.moving, .gap, .moving])
        #expect(abs(odometer - t.statistics.observedDistanceM - 2_010) < 30, "odometer \(odometer), observed \(t.statistics.observedDistanceM)")
        let points = try query(track, "getPoints", #"{"sessionID":"s1","limit":5}"#)
        #expect(points.result?.arrayValue?.compactMap { $0["seq"]?.int64Value } == [1, 2, 3, 4, 5])
        #expect(points.result?.arrayValue?.first?["measured"]?["accuracyM"]?.doubleValue == 5)
        #expect(try query(track, "buildTrack", #"{"sessionID":"nope"}"#).code == "notFound")
        #expect(try query(track, "buildTrack", #"{"sessionID":"s1","options":{"stopRadiusM":0}}"#).code == "badInput")
    }

    /// GeoJSON read back as RFC 7946 asks: a FeatureCollection of Features
    /// whose LineStrings have two or more [lon, lat] positions in range.
    @Test func geoJSONFollowsTheRFC() throws {
        let track = try host()
        drive(track)
        #expect(track.commit())
        let text = try #require(try query(track, "exportGeoJSON", #"{"sessionID":"s1"}"#).result?.stringValue)
        let root = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
        #expect(root["type"] as? String == "FeatureCollection")
        let features = try #require(root["features"] as? [[String: Any]])
        var lines = 0
        for feature in features {
            #expect(feature["type"] as? String == "Feature" && feature["properties"] is [String: Any])
            let geometry = try #require(feature["geometry"] as? [String: Any])
            switch geometry["type"] as? String {
            case "LineString":
                let coordinates = try #require(geometry["coordinates"] as? [[Double]])
                #expect(coordinates.count >= 2 && coordinates.allSatisfy { $0.count == 2 && abs($0[0] - 11.5) < 0.1 && abs($0[1] - 48.1) < 0.1 })
                lines += 1
            case "Point":
                let c = try #require(geometry["coordinates"] as? [Double])
                #expect(c.count == 2 && abs(c[0] - 11.5) < 0.1)
            default: Issue.record("unexpected geometry \(geometry)")
            }
        }
        #expect(lines == 3)  // moving, gap, moving
    }

    /// GPX 1.1 read back with Foundation's XML parser: the namespace, one
    /// trkseg per moving segment, every trkpt with lat, lon and time.
    @Test func gpxReadsBack() throws {
        let track = try host()
        drive(track)
        #expect(track.commit())
        let text = try #require(try query(track, "exportGPX", #"{"sessionID":"s1"}"#).result?.stringValue)
        final class Reader: NSObject, XMLParserDelegate {
            var namespace: String?, segments = 0, points = 0, timed = 0, inTime = false
            func parser(_ parser: XMLParser, didStartElement name: String, namespaceURI: String?, qualifiedName: String?, attributes: [String: String]) {
                switch name {
                case "gpx": namespace = attributes["xmlns"]
                case "trkseg": segments += 1
                case "trkpt": if Double(attributes["lat"] ?? "") != nil, Double(attributes["lon"] ?? "") != nil { points += 1 }
                case "time": inTime = true
                default: break
                }
            }
            func parser(_ parser: XMLParser, foundCharacters string: String) {
                if inTime, ISO8601DateFormatter().date(from: string.replacingOccurrences(of: #"\.\d+"#, with: "", options: .regularExpression)) != nil { timed += 1 }
            }
            func parser(_ parser: XMLParser, didEndElement name: String, namespaceURI: String?, qualifiedName: String?) { if name == "time" { inTime = false } }
        }
        let reader = Reader()
        let parser = XMLParser(data: Data(text.utf8))
        parser.delegate = reader
        #expect(parser.parse(), "\(String(describing: parser.parserError))")
        #expect(reader.namespace == "http://www.topografix.com/GPX/1/1")
        #expect(reader.segments == 2 && reader.points >= 4 && reader.timed == reader.points)
    }

    @Test func polylinesDecodeBackToTheLine() throws {
        let line = [(48.1, 11.5), (48.10123, 11.50456), (48.09, 11.49)]
        let encoded = Polyline.encode(line)
        // Decoded independently of the encoder: 5-bit chunks, zig-zag, deltas.
        var values: [Int] = [], value = 0, shift = 0
        for byte in encoded.utf8 {
            let chunk = Int(byte) - 63
            value |= (chunk & 0x1f) << shift
            shift += 5
            if chunk < 0x20 { values.append(value & 1 != 0 ? ~(value >> 1) : value >> 1); value = 0; shift = 0 }
        }
        var lat = 0, lon = 0, decoded: [(Double, Double)] = []
        for i in stride(from: 0, to: values.count, by: 2) { lat += values[i]; lon += values[i + 1]; decoded.append((Double(lat) / 1e5, Double(lon) / 1e5)) }
        #expect(decoded.count == 3 && zip(decoded, line).allSatisfy { abs($0.0 - $1.0) < 1e-5 && abs($0.1 - $1.1) < 1e-5 })
    }
}

extension TrackHostTests {
    /// A burst of points in one batch publishes one live frame (the newest),
    /// retained at QoS 0, with the motion state, a simplified tail and the session so far.
    @Test func aBurstPublishesTheNewestLiveFrameOnly() throws {
        let track = try host()
        track.receive(MQTTMessage(topic: "tracker/van1/motion", payload: JSONCoding.bytes(
            MotionMessage(device: DeviceID("van1")!, seq: 1, timeMs: t0, state: .moving, epoch: "m"))))
        for i in 0..<60 { track.receive(point(Int64(i + 1), t: Double(i), x: Double(i) * 10, odometer: 100 + Double(i) * 10)) }
        #expect(track.commit())
        let frames = bus.messages.filter { $0.topic == "tracker/van1/live" }
        #expect(frames.count == 1 && frames[0].retain && frames[0].qos == .atMostOnce)
        let frame = try JSONDecoder().decode(LiveFrame.self, from: Data(frames[0].payload))
        #expect(frame.timeMs == t0 + 59_000 && frame.motion == .moving)
        #expect(frame.tail.count == 2)  // a straight line: its two ends
        #expect(frame.session.map { $0.id == "s1" && $0.points == 60 && abs($0.distanceM - 590) < 1e-6 && $0.durationSec == 59 } == true)
        // The next batch: one more frame.
        track.receive(point(61, t: 60, x: 600, odometer: 700))
        #expect(track.commit())
        #expect(bus.messages.filter { $0.topic == "tracker/van1/live" }.count == 2)
    }
}

extension TrackHostTests {
    func point(_ device: String, _ seq: Int64, t: Double, x: Double) -> MQTTMessage {
        let (lat, lon) = frame.toGeo(x: x, y: 0)
        let p = TrackPoint(seq: seq, sessionID: "s-\(device)", timeMs: t0 + Int64(t * 1000), latitude: lat, longitude: lon,
                           accuracyM: 5, speedMps: 10, courseDeg: 90, odometerM: x)
        return MQTTMessage(topic: "tracker/\(device)/points", payload: JSONCoding.bytes(PointMessage(device: DeviceID(device)!, point: p, epoch: "f")))
    }

    /// `getLive` answers the frame the topic carried: for one device, or
    /// the fleet's in device order, page by page after `next`.
    @Test func getLiveAnswersTheFramesTheTopicCarries() throws {
        let track = try host()
        for (n, device) in ["van3", "van1", "car2", "bike9", "van2"].enumerated() {
            for i in 0..<5 { track.receive(point(device, Int64(i + 1), t: Double(i), x: Double(n * 1000 + i * 10))) }
        }
        #expect(track.commit())
        let published = try JSONDecoder().decode(LiveFrame.self, from: Data(try #require(bus.messages.last { $0.topic == "tracker/van1/live" }).payload))
        let one = try query(track, "getLive", "{}")
        #expect(try JSONDecoder().decode(LiveFrame.self, from: JSONEncoder().encode(try #require(one.result))) == published)

        var devices: [String] = []
        var after: String?
        var pages = 0
        repeat {
            let reply = try query(track, "getLive", after.map { #"{"limit":2,"after":"\#($0)"}"# } ?? #"{"limit":2}"#, device: "_fleet")
            #expect(reply.ok)
            devices += reply.result?["frames"]?.arrayValue?.compactMap { $0["device"]?.stringValue } ?? []
            after = reply.result?["next"]?.stringValue
            pages += 1
        } while after != nil && pages < 10
        #expect(devices == ["bike9", "car2", "van1", "van2", "van3"])
        #expect(pages == 3)

        #expect(try query(track, "getLive", #"{"limit":0}"#, device: "_fleet").code == "badInput")
        #expect(try query(track, "getLive", "{}", device: "_health").code == "badInput")
        #expect(try query(track, "getLive", "{}", device: "nobody").code == "notFound")
    }

    /// A page stops short of `maxReplyBytes`, and `next` carries on from there.
    @Test func aFleetPageStopsAtTheReplyBound() throws {
        let track = try ServiceHost(TrackService.definition(try TrackSettings(.test())), databasePath: database.path, bus: bus,
                                    topics: Topics(), logger: Logger(label: "test", minimum: .off), counters: HealthCounters(),
                                    clock: clock, maxReplyBytes: 4_096).runningParts()
        // A zigzag keeps every vertex of the tail: frames of about 2.5 KB, one a page.
        for device in ["a1", "a2", "a3"] {
            for i in 0..<60 {
                let (lat, lon) = frame.toGeo(x: Double(i) * 20, y: i % 2 == 0 ? 0 : 30)
                let p = TrackPoint(seq: Int64(i + 1), sessionID: "s", timeMs: t0 + Int64(i) * 1000, latitude: lat, longitude: lon, accuracyM: 5, odometerM: 0)
                track.receive(MQTTMessage(topic: "tracker/\(device)/points", payload: JSONCoding.bytes(PointMessage(device: DeviceID(device)!, point: p, epoch: "f"))))
            }
        }
        #expect(track.commit())
        var pages: [[String]] = []
        var after: String?
        repeat {
            let reply = try query(track, "getLive", after.map { #"{"after":"\#($0)"}"# } ?? "{}", device: "_fleet")
            pages.append(reply.result?["frames"]?.arrayValue?.compactMap { $0["device"]?.stringValue } ?? [])
            after = reply.result?["next"]?.stringValue
        } while after != nil && pages.count < 10
        #expect(pages == [["a1"], ["a2"], ["a3"]])
    }

    /// `retainLiveFrames` off: frames go unretained, and a frame retained
    /// before is cleared once (an empty retained message) with the first.
    @Test func framesNotRetainedClearTheRetainedOneOnce() throws {
        let track = try ServiceHost<TrackRow>.inProcess(TrackService.definition(try TrackSettings(.test(["retainLiveFrames": .bool(false)]))),
                                                        path: database.path, bus: bus, clock: clock)
        track.receive(point("van1", 1, t: 0, x: 0))
        #expect(track.commit())
        track.receive(point("van1", 2, t: 1, x: 10))
        track.receive(point("van1", 3, t: 2, x: 20))
        #expect(track.commit())
        let sent = bus.messages.filter { $0.topic == "tracker/van1/live" }
        #expect(sent.map(\.payload.isEmpty) == [true, false, false])
        #expect(sent[0].retain && sent[0].qos == .atLeastOnce && !sent[1].retain && !sent[2].retain)
        #expect(try query(track, "getLive", "{}").result?["timeMs"]?.int64Value == t0 + 2_000)
        // The clear is stored with the row: not sent again once it is read back.
        var row = TrackRow()
        row.retainedFrameCleared = true
        #expect(try TrackRow.restored(from: Data(row.stored), using: JSONCoding.decoder) == row)
        row.retainedFrameCleared = false
        #expect(try TrackRow.restored(from: Data(row.stored), using: JSONCoding.decoder) == row)
    }

    @Test func theRowReadsBackAsWritten() throws {
        var row = TrackRow(lastTimeMs: 5, lastLatitude: 48.1, lastLongitude: 11.5,
                           last: TrackPoint(seq: 3, sessionID: "s", timeMs: 5, latitude: 48.1, longitude: 11.5, accuracyM: 4, speedMps: 2, odometerM: 9),
                           motion: .stopPending, tail: [Vertex(latitude: 48.1, longitude: 11.5, timeMs: 5)],
                           session: LiveSession(id: "s", startMs: 1, distanceM: 9, durationSec: 4, points: 3, maxSpeedMps: 2), sessionStartOdometerM: 0)
        #expect(try JSONCoding.decoder.decode(TrackRow.self, from: JSONCoding.encode(row)) == row)
        row = TrackRow()
        #expect(try JSONCoding.decoder.decode(TrackRow.self, from: JSONCoding.encode(row)) == row)
    }
}

extension TrackHostTests {
    /// The GPX read back by an independent GPX parser (Debian's python3-gpxpy,
    /// installed by scripts/setup): two track segments of timed points, in order.
    @Test func gpxpyReadsTheExport() throws {
        let track = try host()
        drive(track)
        #expect(track.commit())
        let text = try #require(try query(track, "exportGPX", #"{"sessionID":"s1"}"#).result?.stringValue)
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("export-\(UUID().uuidString).gpx")
        try text.write(to: file, atomically: true, encoding: .utf8)
        let script = """
            import gpxpy, sys
            g = gpxpy.parse(open(sys.argv[1]))
            segs = g.tracks[0].segments
            times = [p.time for s in segs for p in s.points]
            print(len(g.tracks), len(segs), sum(len(s.points) for s in segs), all(t is not None for t in times), times == sorted(times), len(g.waypoints))
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = ["-c", script, file.path]
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        process.waitUntilExit()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).split(separator: " ").map(String.init)
        #expect(process.terminationStatus == 0)
        #expect(output.count == 6 && output[0] == "1" && output[1] == "2" && (Int(output[2]) ?? 0) >= 4, "\(output)")
        #expect(output.count == 6 && output[3] == "True" && output[4] == "True" && output[5].hasPrefix("0"), "\(output)")
    }
}

extension TrackHostTests {
    @Test func aDaysSummary() throws {
        let track = try host()
        drive(track)
        #expect(track.commit())
        let reply = try query(track, "getSummary", #"{"fromMs":\#(t0 - 1_000),"toMs":\#(t0 + 86_400_000)}"#)
        let s = try #require(reply.result)
        #expect(s["points"]?.doubleValue == 120 && s["trips"]?.doubleValue == 1 && s["stops"]?.doubleValue == 0)
        #expect(s["firstFixMs"]?.int64Value == t0 && s["lastFixMs"]?.int64Value == t0 + 1_019_000)
        // The odometer covers the gap's 2 km; the observed distance does not.
        #expect((s["odometerDistanceM"]?.doubleValue ?? 0) - (s["observedDistanceM"]?.doubleValue ?? 0) > 1_900)
        #expect(try query(track, "getSummary", #"{"fromMs":5}"#).code == "badInput")
        #expect(try query(track, "getSummary", #"{"fromMs":10,"toMs":5}"#).code == "badInput")
    }
}

extension TrackHostTests {
    /// With a road-snapping server that does not answer, the track is built
    /// unsnapped and says why; a bad URL stops the service at start, by name.
    @Test func aDeadRoadSnapServerLeavesTheTrackUnsnapped() throws {
        #expect(throws: ConfigError.self) { try TrackSettings(SettingsReader(values: ["roadSnapUrl": .string("osrm")], source: "test")) }
        let settings = try TrackSettings(SettingsReader(values: ["roadSnapUrl": .string("http://127.0.0.1:\(try freePort())")], source: "test"))
        let track = try ServiceHost.inProcess(TrackService.definition(settings), path: database.path, bus: bus, clock: clock)
        drive(track)
        #expect(track.commit())
        let built = try #require(try query(track, "buildTrack", #"{"sessionID":"s1"}"#).result?.decode(Track.self))
        #expect(built.roadSnapped == nil && built.diagnostics?.first?.contains("connection refused") == true, "\(String(describing: built.diagnostics))")
        #expect(built.segments.map(\.kind) == [.moving, .gap, .moving])
    }

    /// A point of `device`, `t` seconds after t0, received by the gateway at `receivedMs`.
    func point(of device: String, _ seq: Int64, t: Double, receivedMs: Int64?) -> MQTTMessage {
        let p = TrackPoint(seq: seq, sessionID: "s1", timeMs: t0 + Int64(t * 1000), latitude: 48.1 + t * 1e-5, longitude: 11.5,
                           accuracyM: 4.6, speedMps: 10, courseDeg: 359.6, odometerM: t * 10)
        let m = MeasuredFix(latitude: p.latitude, longitude: p.longitude, accuracyM: 4.6, altitudeM: 512.4, batteryPct: 81)
        return MQTTMessage(topic: "tracker/\(device)/points", payload: JSONCoding.bytes(
            PointMessage(device: DeviceID(device)!, point: p, epoch: "f", measured: m, receivedMs: receivedMs)))
    }

    @Test func anOwnTracksDevicesNewestPointIsPublishedForItsFriends() throws {
        let track = try host()
        for (seq, t) in [(1, 0.0), (2, 1.0)] { track.receive(point(of: "jane.phone", Int64(seq), t: t, receivedMs: nil)) }
        track.receive(point(of: "van1", 1, t: 0, receivedMs: nil))
        #expect(track.commit())
        let friends = bus.messages.filter { $0.topic.hasPrefix("owntracks/") }
        // The card once, the newest of the batch's positions; none for a device that is no OwnTracks app.
        #expect(friends.map(\.topic) == ["owntracks/_tracker/jane.phone/info", "owntracks/_tracker/jane.phone"])
        #expect(friends.allSatisfy { $0.retain })
        let card = try JSONDecoder().decode([String: String].self, from: Data(friends[0].payload))
        #expect(card == ["_type": "card", "name": "phone (jane)", "tid": "JP"])
        var location = try JSONDecoder().decode([String: JSONValue].self, from: Data(friends[1].payload))
        #expect(abs((location.removeValue(forKey: "lat")?.doubleValue ?? 0) - 48.10001) < 1e-9)
        #expect(location == ["_type": .string("location"), "lon": .number(11.5), "tst": .number(Double(t0 / 1000 + 1)),
                             "acc": .number(5), "tid": .string("JP"), "vel": .number(36), "cog": .number(0), "alt": .number(512), "batt": .number(81)],
                "\(location)")
        // A late point (a repair) does not move the friend back; the card is not said again.
        bus.clear()
        track.receive(point(of: "jane.phone", 3, t: 0.5, receivedMs: nil))
        track.receive(point(of: "jane.phone", 4, t: 2, receivedMs: nil))
        #expect(track.commit())
        #expect(bus.messages.filter { $0.topic.hasPrefix("owntracks/") }.map(\.topic) == ["owntracks/_tracker/jane.phone"])
    }

    @Test func friendsAreASetting() throws {
        for (policy, expected) in [("all", ["owntracks/_tracker/van1/info", "owntracks/_tracker/van1"]), ("off", [])] {
            bus.clear()
            let db = TemporaryDatabase("track-friends-\(policy)")
            let track = try ServiceHost.inProcess(TrackService.definition(try TrackSettings(.test(["friends": .string(policy)]))),
                                                  path: db.path, bus: bus, clock: clock)
            track.receive(point(of: "van1", 1, t: 0, receivedMs: nil))
            #expect(track.commit())
            #expect(bus.messages.filter { $0.topic.hasPrefix("owntracks/") }.map(\.topic) == expected, "\(policy)")
        }
        #expect(throws: ConfigError.self) { try TrackSettings(.test(["friends": .string("team")])) }
    }

    @Test func aReplaysLagCountsFromArrivalAndItsFixAgeSaysReplay() throws {
        let counters = HealthCounters()
        let track = try ServiceHost.inProcess(TrackService.definition(try TrackSettings(.test())), path: database.path, bus: bus,
                                              clock: clock, counters: counters)
        // t0 lies years before the manual clock's now: a recording replayed; the gateway got it 40 ms ago.
        let now = clock.nowMs()
        track.receive(point(of: "van1", 1, t: 0, receivedMs: now - 40))
        #expect(track.commit())
        let values = counters.snapshot()
        #expect(values.lagMs == 40)
        #expect(values.fixAgeMs == now - t0 && now - t0 > Health.replayAgeMs)
        // A point from a filter before receivedMs was carried: counted from its own time, as before.
        track.receive(point(of: "van1", 2, t: 1, receivedMs: nil))
        #expect(track.commit())
        #expect(counters.snapshot().lagMs == now - t0 - 1_000)
    }
}
