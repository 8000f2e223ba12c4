import Bus
import Foundation
import TestSupport

/// A service that does nothing: it republishes every fix on `raw` unchanged,
/// on the same bus. Run as its own process, it measures what two broker hops
/// cost on this machine, the ceiling for any service on that path.
enum Relay {
    /// `tracker-bench relay PORT [points]`: runs until killed. With `points`,
    /// it subscribes as the motion service does and forwards only the points
    /// marked as last (`"sessionID":"final"`) onto `events`.
    static func serve(port: Int32, points: Bool = false) async throws -> Never {
        // Persistent like a service's (a reconnect under load loses nothing); ended by `forget` after each run.
        let client = try MQTTClient(MQTTOptions(port: port, clientID: clientID(points: points), cleanStart: false, sessionExpirySec: 600))
        let marker = Array(#""sessionID":"final""#.utf8)
        client.setHandler { [unowned client] message in
            let parts = message.topic.split(separator: "/")
            if !points {
                try? client.publish(MQTTMessage(topic: "tracker/\(parts[1])/raw", payload: message.payload))
            } else if parts.last == "points", message.payload.firstRange(of: marker) != nil {
                try? client.publish(MQTTMessage(topic: "tracker/\(parts[1])/events", payload: message.payload))
            }
        }
        try await client.connect()
        try await client.subscribe(points ? ["tracker/+/points", "tracker/+/events", "tracker/+/activity"] : ["tracker/+/fixes"])
        try await client.publishAndWait(MQTTMessage(topic: "tracker/_health/relay", string: #"{"status":"online"}"#, retain: true))
        while true { try await Task.sleep(for: .seconds(3600)) }
    }

    static func clientID(points: Bool) -> String { "bench-relay\(points ? "-points" : "")" }

    /// Kills the relay and ends its session (see `Throughput.retire`).
    static func stop(_ relay: ChildProcess, points: Bool, _ broker: TestBroker) async throws {
        relay.kill(SIGKILL)
        _ = relay.wait(timeout: 5)
        try await Throughput.forget(clientID: clientID(points: points), broker, retainedHealth: "tracker/_health/relay")
    }

    /// Fixes published until the same number came back on `raw` through the relay.
    static func measure(_ broker: TestBroker, count: Int) async throws -> Double {
        let executable = ServiceHarness.binaryDirectory.appendingPathComponent("tracker-bench").path
        let relay = try ChildProcess(executable: executable, arguments: ["relay", "\(broker.port)"],
                                     logFile: broker.directory.appendingPathComponent("relay.log").path)
        let sink = try await MessageCollector(port: broker.port, filters: ["tracker/+/raw", "tracker/_health/relay"])
        try await sink.wait(description: "relay online") { $0.contains { $0.topic.hasSuffix("/relay") } }
        let payloads = (0..<count).map { i in
            (topic: "tracker/relay\(i % 8)/fixes",
             payload: Array(String(format: Throughput.fixTemplate, 1_700_000_000.0 + Double(i / 8), 48.1, 11.5).utf8))
        }
        let rate = try await Throughput.pump(broker, sink, payloads, leaf: "raw", count: count)
        try await stop(relay, points: false, broker)
        return rate
    }
}
