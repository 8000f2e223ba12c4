import Bus
import Foundation
import Model
import TestSupport
import Testing

/// Gateway, filter and motion as real processes on a real broker: fixes in,
/// motion and geofence events out.
@Suite(.serialized) struct MotionEndToEndTests {
    let broker: TestBroker
    let gateway: ServiceHarness
    let filter: ServiceHarness
    let motion: ServiceHarness
    let frame = LocalFrame(originLat: 48.1, originLon: 11.5)
    let t0 = 1_790_000_000.0

    init() throws {
        broker = try TestBroker()
        gateway = try .started("gateway", on: broker)
        filter = try .started("filter", on: broker, config: ["rejectionEvents": "off"])
        motion = try .started("motion", on: broker)
    }

    /// A fix `x` metres east (and `y` north) of the origin, `t` seconds in.
    func fix(_ t: Double, x: Double, y: Double = 0, speed: Double) -> String {
        let (lat, lon) = frame.toGeo(x: x, y: y)
        return String(format: #"{"t":%.3f,"lat":%.8f,"lon":%.8f,"acc":5,"speed":%.2f,"course":90}"#, t0 + t, lat, lon, speed)
    }

    func fence(_ id: String, x: Double, y: Double = 0, radius: Double, dwellMs: Int? = nil) -> JSONValue {
        let (lat, lon) = frame.toGeo(x: x, y: y)
        var args: [String: JSONValue] = ["id": .string(id), "latitude": .number(lat), "longitude": .number(lon), "radiusM": .number(radius)]
        if let dwellMs { args["dwellAfterMs"] = .number(Double(dwellMs)) }
        return .object(args)
    }

    func publish(_ client: MQTTClient, _ device: String, _ lines: [String]) async throws {
        for line in lines { try await client.publishAndWait(MQTTMessage(topic: "tracker/\(device)/fixes", string: line)) }
    }

    func crossings(_ events: [Event]) -> [Crossing] { events.compactMap { if case .geofence(let c) = $0.body { c } else { nil } } }

    /// Three fences with known crossings: `depot` (driven through, with a
    /// dwell), `bridge` (passed between two fixes a minute apart, none inside)
    /// and `yard` (armed around the parked van: it enters at once).
    @Test func aScriptedDriveThroughThreeFences() async throws {
        try await broker.waitUntilOnline("gateway", "filter", "motion")
        let out = try await MessageCollector(port: broker.port, filters: ["tracker/van1/events"])
        let client = try await TestClient.connect(port: broker.port)
        for (id, x, y, r, dwell) in [("depot", 500.0, 0.0, 150.0, 20_000 as Int?), ("bridge", 1_300, 20, 100, nil)] {
            let reply = try await TestClient.command(client, device: "van1", "addGeofence", args: fence(id, x: x, y: y, radius: r, dwellMs: dwell))
            #expect(reply.ok, "\(reply)")
        }
        var lines = (0...100).map { fix(Double($0), x: Double($0) * 10, speed: 10) }
        lines += (160...200).map { fix(Double($0), x: 1_600 + Double($0 - 160) * 10, speed: 10) }
        lines += (201...600).map { fix(Double($0), x: 2_000 + Double($0 % 3) - 1, speed: 0) }
        try await publish(client, "van1", lines)
        try await out.wait(description: "the van settles") { all in
            all.filter { $0.string.contains("motionChange") && $0.string.contains(#""state":"stationary""#) }.count >= 2
        }
        let yard = try await TestClient.command(client, device: "van1", "addGeofence", args: fence("yard", x: 2_000, radius: 100))
        #expect(yard.ok)
        try await out.wait(description: "the yard entered at once") { all in all.contains { $0.string.contains("geofenceEnter") && $0.string.contains("yard") } }
        // It drives off: the stop and the yard visit end.
        try await publish(client, "van1", (601...640).map { fix(Double($0), x: 2_000 + Double($0 - 600) * 10, speed: 10) })
        try await out.wait(description: "the yard exited") { all in all.contains { $0.string.contains("geofenceExit") && $0.string.contains("yard") } }
        try await out.wait(description: "the stop ended") { all in all.contains { $0.string.contains("stopEnded") } }

        let seen = crossings(out.events())
        #expect(seen.map { "\($0.geofenceID) \($0.kind.rawValue)" }
                == ["depot enter", "depot dwell", "depot exit", "bridge enter", "bridge exit", "yard enter", "yard exit"])
        func at(_ id: String, _ kind: Crossing.Kind) -> Double {
            Double(seen.first { $0.geofenceID == id && $0.kind == kind }!.timeMs) / 1000 - t0
        }
        // True times: depot 35 s and 65 s; the bridge's line meets the circle at 119.8 s and 139.8 s; yard exit 610 s.
        #expect(abs(at("depot", .enter) - 35) < 5 && abs(at("depot", .exit) - 65) < 5)
        #expect(at("depot", .dwell) == at("depot", .enter) + 20)
        #expect(abs(at("bridge", .enter) - 119.8) < 5 && abs(at("bridge", .exit) - 139.8) < 5)
        #expect(seen.filter { $0.geofenceID == "bridge" }.allSatisfy { $0.interpolated == true })
        #expect(abs(at("yard", .exit) - 610) < 5)
        // Arrived at 200 s: settled a stop timeout (5 min) later, within −60 … +30 s; moving again within 60 s of 600 s.
        let settled = out.events().last { if case .motionChange(.stationary, _) = $0.body { true } else { false } }
        #expect(settled.map { (440...530).contains(Double($0.timeMs) / 1000 - t0) } == true)
        let departed = out.events().last { if case .motionChange(.moving, _) = $0.body { true } else { false } }
        #expect(departed.map { (600...660).contains(Double($0.timeMs) / 1000 - t0) } == true)
        let states = out.events().compactMap { if case .motionChange(let s, _) = $0.body { s } else { nil } }
        #expect(states == [.stationary, .moving, .stopPending, .stationary, .moving])

        // The history, newest first, and the reports.
        let history = try await TestClient.command(client, device: "van1", "getGeofenceEvents", args: .object(["limit": .number(3)]))
        #expect(history.result?.arrayValue?.compactMap { $0["geofenceID"]?.stringValue } == ["yard", "yard", "bridge"])
        let trips = try await TestClient.command(client, device: "van1", "getTrips")
        let trip = try #require(trips.result?.arrayValue?.first)
        #expect(trip["distanceM"]?.doubleValue.map { (1_900...2_100).contains($0) } == true, "\(trip)")
        let stops = try await TestClient.command(client, device: "van1", "getStops")
        #expect(stops.result?.arrayValue?.count == 2)  // where it started, and the yard
        let noPace = try await TestClient.command(client, device: "nobody", "changePace", args: .object(["isMoving": .bool(true)]))
        #expect(noPace.code == "notReady")
        await out.close()
    }

    /// A kill -9 between entry and dwell: the dwell still comes once, stamped entry + delay.
    @Test func aRestartBetweenEntryAndDwell() async throws {
        try await broker.waitUntilOnline("gateway", "filter", "motion")
        let out = try await MessageCollector(port: broker.port, filters: ["tracker/van2/events"])
        let client = try await TestClient.connect(port: broker.port)
        #expect(try await TestClient.command(client, device: "van2", "addGeofence", args: fence("depot", x: 0, radius: 200, dwellMs: 120_000)).ok)
        // In at 10 m/s (the edge at 30 s), parked inside from 60 s; the motion service dies meanwhile.
        try await publish(client, "van2", (0...40).map { fix(Double($0), x: -500 + Double($0) * 10, speed: 10) })
        try await out.wait(description: "entered") { all in all.contains { $0.string.contains("geofenceEnter") } }
        motion.kill9()
        try await publish(client, "van2", (41...60).map { fix(Double($0), x: -500 + Double($0) * 10, speed: 10) })
        try await publish(client, "van2", (61...300).map { fix(Double($0), x: 100 + Double($0 % 2), speed: 0) })
        try motion.start()
        try await out.wait(description: "dwelled") { all in all.contains { $0.string.contains("geofenceDwell") } }
        let seen = crossings(out.events())
        let enter = try #require(seen.first { $0.kind == .enter }), dwell = try #require(seen.first { $0.kind == .dwell })
        #expect(dwell.timeMs == enter.timeMs + 120_000)
        #expect(seen.filter { $0.kind == .enter }.count == 1)
        await out.close()
    }

    /// The Pixel 6 walk with a seven-minute stand spliced in, and low- and
    /// medium-confidence `still` readings every fifth fix: one stop, no flaps.
    @Test func aWalkWithAStopAndLowConfidenceStillsNeverFlaps() async throws {
        try await broker.waitUntilOnline("gateway", "filter", "motion")
        let out = try await MessageCollector(port: broker.port, filters: ["tracker/walker/events"])
        let client = try await TestClient.connect(port: broker.port)
        var fixes = try Fixtures.fixes("pixel6-walk.jsonl")
        let middle = fixes[95]
        var rng = SeededRandom(seed: 4)
        let stand = (1...140).map { i in
            DeviceFix(t: middle.t + Double(i) * 3, lat: middle.lat + rng.gaussian() * 2e-5, lon: middle.lon + rng.gaussian() * 2e-5, acc: 5, speed: 0)
        }
        let after = fixes[96...].map { f in var f = f; f.t += 420; return f }
        fixes = Array(fixes[...95]) + stand + after
        for (i, f) in fixes.enumerated() {
            try await client.publishAndWait(MQTTMessage(topic: "tracker/walker/fixes", payload: JSONCoding.bytes(f)))
            if i % 5 == 0 {
                let still = ActivityReading(activity: "still", confidence: i % 10 == 0 ? 33 : 66, t: f.t)
                try await client.publishAndWait(MQTTMessage(topic: "tracker/walker/activity", payload: JSONCoding.bytes(still)))
            }
        }
        try await out.wait(description: "the walk resumes after the stand") { all in
            all.filter { $0.string.contains("motionChange") && $0.string.contains(#""state":"moving""#) }.count >= 2
        }
        let states = out.events().compactMap { if case .motionChange(let s, _) = $0.body { s } else { nil } }
        #expect(states == [.stationary, .moving, .stopPending, .stationary, .moving], "\(states)")
        await out.close()
    }
}
