import Bus
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Model
import TestSupport

/// `tracker-bench http [COUNT]`: tracker-http beside the gateway on the
/// product's broker config and ACL, measured in one run:
/// - ingest: COUNT fixes from 8 device accounts through the gateway, once
///   over MQTT (QoS 1, as the apps send them) and once as OsmAnd over HTTP
///   with keep-alive (8 clients, one per device), in fixes per second until
///   the gateway has published every one on `raw`; the ratio HTTP / MQTT;
/// - latency: `GET /api/v1/devices/{d}` at 200 requests a second for 10 s, its p50/p99;
/// - tracker-http's resident memory after both.
enum HTTPBench {
    static let devices = (0..<8).map { "hb\($0)" }

    static func run(count: Int) async throws {
        let passwords = Dictionary(uniqueKeysWithValues: (devices + ["tracker-gateway", "tracker-gateway-out", "tracker-track", "tracker-track-out", "tracker-http", "trackerctl"])
            .map { ($0, "bench-\($0.replacingOccurrences(of: "-out", with: ""))") })
        let broker = try TestBroker(accounts: .init(passwords, aclFile: Repository.root.appendingPathComponent("config/acl").path),
                                    messageSizeLimit: TestBroker.productMessageSizeLimit)
        let gateway = try ServiceHarness(executable: "tracker-gateway", broker: broker, config: ServiceHarness.fastHealth,
                                         environment: ["TRACKER_MQTT_USERNAME": "tracker-gateway", "TRACKER_MQTT_PASSWORD": "bench-tracker-gateway"])
        try gateway.start()
        // The track answers getLive, which tracker-http asks once a session for the frames.
        let track = try ServiceHarness(executable: "tracker-track", broker: broker, config: ServiceHarness.fastHealth,
                                       environment: ["TRACKER_MQTT_USERNAME": "tracker-track", "TRACKER_MQTT_PASSWORD": "bench-tracker-track"])
        try track.start()
        let port = try freeListenerPort()
        let http = try ServiceHarness(executable: "tracker-http", broker: broker,
                                      config: ["httpHost": "127.0.0.1", "httpPort": Int(port), "gatePort": Int(broker.gatePort),
                                               "operatorPort": Int(broker.operatorPort), "healthIntervalSec": 0.5],
                                      environment: ["TRACKER_MQTT_USERNAME": "tracker-http", "TRACKER_MQTT_PASSWORD": "bench-tracker-http"]
                                          .merging(ProcessInfo.processInfo.environment["BENCH_HTTP_ENV"].map { ["MALLOC_ARENA_MAX": $0] } ?? [:]) { $1 })
        try http.start()
        defer { http.stop(); track.stop(); gateway.stop() }
        let operatorClient = { try await MessageCollector(port: broker.operatorPort, filters: $0, username: "trackerctl", password: "bench-trackerctl") }
        let health = try await operatorClient(["tracker/_health/+"])
        for name in ["gateway", "track", "http"] {
            try await health.waitForHealth(timeout: 30, description: "\(name) online") { $0.service == name && $0.status == .online }
        }
        await health.close()
        let base = "http://127.0.0.1:\(port)"

        // Ingest over MQTT: each device on its own login, QoS 1.
        let mqtt = try await ingest(count, base: 1_700_000_000, collector: operatorClient) { fixes in
            var clients: [String: MQTTClient] = [:]
            for device in devices {
                let client = try MQTTClient(MQTTOptions(port: broker.port, clientID: device, username: device, password: passwords[device]))
                try await client.connect()
                clients[device] = client
            }
            for fix in fixes { try clients[fix.device]!.publish(MQTTMessage(topic: "tracker/\(fix.device)/fixes", payload: Array(fix.json.utf8))) }
            let connected = clients
            return { for client in connected.values { await client.disconnect() } }
        }
        // Ingest over HTTP: OsmAnd requests from wrk (Debian's load generator: keep-alive, one event loop), 8 connections.
        let overHTTP = try await ingestWithWrk(seconds: 10, base: "http://127.0.0.1:\(port)", passwords: passwords, collector: operatorClient,
                                                directory: broker.directory)
        print(String(format: "ingest over MQTT (QoS 1, 8 devices):        %7.0f fixes/s", mqtt))
        print(String(format: "ingest over HTTP (OsmAnd, keep-alive, 8):   %7.0f fixes/s   ratio to MQTT: %.2f", overHTTP, overHTTP / mqtt))

        // Latency of the live frame at 200 requests a second.
        let publisher = try MQTTClient(MQTTOptions(port: broker.operatorPort, clientID: "bench-frames", username: "trackerctl", password: "bench-trackerctl"))
        try await publisher.connect()
        try await publisher.publishAndWait(MapPageBench.frame(0, second: 0).retargeted(to: devices[0]))
        let latencies = try await paced(rate: 200, seconds: 10, url: URL(string: "\(base)/api/v1/devices/\(devices[0])")!,
                                        authorization: basic(devices[0], passwords[devices[0]]!))
        await publisher.disconnect()
        let sorted = latencies.sorted()
        func percentile(_ p: Double) -> Double { sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))] * 1000 }
        print(String(format: "GET /api/v1/devices/{d} at 200/s for 10 s: %d requests, p50 %.1f ms, p99 %.1f ms, max %.1f ms",
                     sorted.count, percentile(0.5), percentile(0.99), (sorted.last ?? 0) * 1000))
        if let memory = http.process?.memory {
            print(String(format: "tracker-http resident: %.1f MB (own %.1f MB, peak %.1f MB)",
                         Double(memory.resident) / 1_048_576, Double(memory.own) / 1_048_576, Double(memory.peak) / 1_048_576))
        }
    }

    struct Fix { var device: String; var t: Int; var lat: Double; var json: String }

    /// wrk for `seconds`, each request the next device's next fix; returns the fixes a second the gateway published.
    static func ingestWithWrk(seconds: Int, base: String, passwords: [String: String],
                              collector: ([String]) async throws -> MessageCollector, directory: URL) async throws -> Double {
        let auth = devices.map { "[\"\($0)\"]=\"\(basic($0, passwords[$0]!))\"" }.joined(separator: ", ")
        let script = directory.appendingPathComponent("ingest.lua")
        try """
            local devices = {\(devices.map { "\"\($0)\"" }.joined(separator: ", "))}
            local auth = {\(auth)}
            local counter = 0
            request = function()
              local d = devices[counter % #devices + 1]
              local step = math.floor(counter / #devices)
              counter = counter + 1
              local path = string.format("/?id=%s&timestamp=%d&lat=%.6f&lon=11.5&accuracy=5&speed=2", d, 1700200000 + step, 48.1 + step * 1e-5)
              return wrk.format("POST", path, {["Authorization"] = auth[d], ["Content-Length"] = "0"})
            end
            """.write(to: script, atomically: true, encoding: .utf8)
        let raw = try await collector(devices.map { "tracker/\($0)/raw" })
        let start = ContinuousClock.now
        let wrk = try ChildProcess(executable: "/usr/bin/wrk", arguments: ["-t1", "-c8", "-d\(seconds)s", "-s", script.path, base],
                                   logFile: directory.appendingPathComponent("wrk.log").path)
        guard wrk.wait(timeout: Double(seconds + 30)) == 0 else { throw TestSupportError("wrk failed: \(wrk.log)") }
        guard let line = wrk.log.split(separator: "\n").first(where: { $0.contains(" requests in ") }),
              let requests = Int(line.split(separator: " ").first ?? "") else { throw TestSupportError("no request count from wrk: \(wrk.log)") }
        if wrk.log.contains("Non-2xx") { throw TestSupportError("refused requests: \(wrk.log)") }
        do {
            try await raw.wait(timeout: 120, description: "\(requests) raw fixes") { $0.count >= requests }
        } catch {
            throw TestSupportError("\(error); wrk: \(wrk.log)")
        }
        let elapsed = ContinuousClock.now - start
        await raw.close()
        return Double(requests) / (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
    }

    /// Sends `count` fixes with `send` and returns fixes a second until the gateway has published all of them.
    static func ingest(_ count: Int, base: Int, collector: ([String]) async throws -> MessageCollector,
                       send: ([Fix]) async throws -> (() async -> Void)) async throws -> Double {
        let fixes = (0..<count).map { i -> Fix in
            let device = devices[i % devices.count], t = base + i / devices.count, lat = 48.1 + Double(i / devices.count) * 1e-5
            return Fix(device: device, t: t, lat: lat, json: #"{"t":\#(t),"lat":\#(lat),"lon":11.5,"acc":5,"speed":2}"#)
        }
        let raw = try await collector(devices.map { "tracker/\($0)/raw" })
        let start = ContinuousClock.now
        let finish = try await send(fixes)
        do {
            try await raw.wait(timeout: 120, description: "\(count) raw fixes") { $0.count >= count }
        } catch {
            let byDevice = Dictionary(grouping: raw.messages, by: \.topic).mapValues(\.count)
            throw TestSupportError("\(error); by device: \(byDevice.sorted { $0.key < $1.key })")
        }
        let elapsed = ContinuousClock.now - start
        await finish()
        await raw.close()
        return Double(count) / (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
    }

    /// Requests started on a fixed schedule (not each after the last), their durations in seconds.
    static func paced(rate: Int, seconds: Int, url: URL, authorization: String) async throws -> [Double] {
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let start = ContinuousClock.now
        return try await withThrowingTaskGroup(of: Double.self) { group in
            for i in 0..<(rate * seconds) {
                let due = start + .milliseconds(Int64(i * 1000 / rate))
                if due > ContinuousClock.now { try await Task.sleep(until: due, clock: .continuous) }
                group.addTask {
                    var request = URLRequest(url: url)
                    request.setValue(authorization, forHTTPHeaderField: "Authorization")
                    let began = ContinuousClock.now
                    let (_, response) = try await session.data(for: request)
                    guard (response as? HTTPURLResponse)?.statusCode == 200 else { throw TestSupportError("GET answered \(response)") }
                    let took = ContinuousClock.now - began
                    return Double(took.components.seconds) + Double(took.components.attoseconds) / 1e18
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
    }

    static func basic(_ user: String, _ password: String) -> String { "Basic " + Data("\(user):\(password)".utf8).base64EncodedString() }
}

extension MQTTMessage {
    /// The same frame for another device's topic.
    func retargeted(to device: String) -> MQTTMessage {
        var copy = self
        copy.topic = "tracker/\(device)/live"
        var text = string
        if let range = text.range(of: #""device":"[^"]*""#, options: .regularExpression) { text.replaceSubrange(range, with: #""device":"\#(device)""#) }
        copy.payload = Array(text.utf8)
        return copy
    }
}
