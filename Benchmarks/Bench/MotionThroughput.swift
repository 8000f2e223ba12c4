import Bus
import Foundation
import Model
import TestSupport

/// `tracker-bench motion`: the motion service against a do-nothing relay
/// over the same hops and fan-out, in the same run. Points go in on
/// `tracker/{d}/points` (eight devices driving through 1,000 fleet fences);
/// the last point of each device lands in a `finish` fence, and the run ends
/// when all eight entries are out. The relay subscribes to what the service
/// does (points, events, activity) and forwards only those last points.
enum MotionThroughput {
    static let devices = 8

    /// `service` is `motion` or `track`.
    static func run(count: Int, service: String = "motion") async throws {
        let broker = try TestBroker()
        var relay: [Double] = [], measured: [Double] = []
        for _ in 0..<3 {
            relay.append(try await measureRelay(broker, count: count))
            measured.append(service == "track" ? try await measureTrack(broker, count: count) : try await measureMotion(broker, count: count))
        }
        func list(_ rates: [Double]) -> String { rates.map { String(format: "%.0f", $0) }.joined(separator: " / ") }
        print("relay points→(last point)→events (no work): \(list(relay)) points/s")
        print(service == "track" ? "track service, storing every point:         \(list(measured)) points/s"
                                 : "motion service, 1,000 fleet fences:           \(list(measured)) points/s")
        print("ratio per run: " + zip(measured, relay).map { String(format: "%.2f", $0 / $1) }.joined(separator: " / "))
    }

    /// Device `d`'s points: along a winding line through the fenced square at
    /// 12 m/s, 1 Hz; the last one far east, in the `finish` fence.
    static func payloads(_ count: Int) -> [(topic: String, payload: [UInt8])] {
        let frame = LocalFrame(originLat: 48.1, originLon: 11.5)
        let perDevice = count / devices
        return (0..<(perDevice * devices)).map { i in
            let d = i % devices, k = i / devices
            let device = DeviceID("mbench\(d)")!
            let last = k == perDevice - 1
            let s = Double(k) * 12
            let (lat, lon) = last ? frame.toGeo(x: 50_000, y: 0)
                : frame.toGeo(x: -9_000 + s.truncatingRemainder(dividingBy: 18_000), y: Double(d) * 2_000 - 8_000 + 500 * sin(s / 700))
            // The last point comes 15 minutes after the one before, 50 km away: a fence
            // entry for the motion service, a tracking gap for the track service.
            let point = TrackPoint(seq: Int64(k + 1), sessionID: last ? "final" : "s", timeMs: 1_700_000_000_000 + Int64(k) * 1_000 + (last ? 900_000 : 0),
                                   latitude: lat, longitude: lon, accuracyM: 8, speedMps: 12, odometerM: s)
            return ("tracker/\(device)/points", JSONCoding.bytes(PointMessage(device: device, point: point, epoch: "bench")))
        }
    }

    static func measureMotion(_ broker: TestBroker, count: Int) async throws -> Double {
        let motion = try await Throughput.launch("motion", broker, listening: ["tracker/+/events"], config: ["maxFleetGeofences": 2_000])
        try await addFences(broker)
        let rate = try await Throughput.pump(broker, motion.sink, payloads(count), marker: #""geofenceID":"finish""#, count: devices)
        try await motion.finish(messages: count, broker)
        return rate
    }

    /// The track service storing the same points; the run ends with the eight tracking gaps.
    static func measureTrack(_ broker: TestBroker, count: Int) async throws -> Double {
        let track = try await Throughput.launch("track", broker, listening: ["tracker/+/events"])
        let rate = try await Throughput.pump(broker, track.sink, payloads(count), marker: #""type":"trackingGap""#, count: devices)
        try await track.finish(messages: count, broker)
        return rate
    }

    static func measureRelay(_ broker: TestBroker, count: Int) async throws -> Double {
        let executable = ServiceHarness.binaryDirectory.appendingPathComponent("tracker-bench").path
        let relay = try ChildProcess(executable: executable, arguments: ["relay", "\(broker.port)", "points"],
                                     logFile: broker.directory.appendingPathComponent("relay-points.log").path)
        let sink = try await MessageCollector(port: broker.port, filters: ["tracker/+/events", "tracker/_health/relay"])
        try await sink.wait(description: "relay online") { $0.contains { $0.topic.hasSuffix("/relay") } }
        let rate = try await Throughput.pump(broker, sink, payloads(count), marker: #""sessionID":"final""#, count: devices)
        try await Relay.stop(relay, points: true, broker)
        return rate
    }

    /// 1,000 fleet fences of 50–500 m over the 20 km square, and the finish.
    static func addFences(_ broker: TestBroker) async throws {
        let client = try await TestClient.connect(port: broker.port)
        defer { Task { await client.disconnect() } }
        let frame = LocalFrame(originLat: 48.1, originLon: 11.5)
        var rng = SeededRandom(seed: 5)
        var fences = (0..<1_000).map { i -> (String, Double, Double, Double) in
            let (lat, lon) = frame.toGeo(x: .random(in: -10_000...10_000, using: &rng), y: .random(in: -10_000...10_000, using: &rng))
            return ("f\(i)", lat, lon, .random(in: 50...500, using: &rng))
        }
        let (lat, lon) = frame.toGeo(x: 50_000, y: 0)
        fences.append(("finish", lat, lon, 200))
        for (id, lat, lon, radius) in fences {
            let reply = try await TestClient.command(client, device: "_fleet", "addGeofence", args: .object([
                "id": .string(id), "latitude": .number(lat), "longitude": .number(lon), "radiusM": .number(radius)]))
            guard reply.ok else { throw TestSupportError("addGeofence refused: \(reply)") }
        }
    }
}
