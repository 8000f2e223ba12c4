import Bus
import Foundation
import Synchronization
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

    /// The filter's hops with nothing done: raw fixes in, each republished on
    /// `points` and on `events` as the filter publishes a point and its
    /// `location` event, until every one came out on `events`. The filter's
    /// ratio is taken against this, not against the gateway's one-out hop.
    static func measureFilterHops(_ broker: TestBroker, count: Int) async throws -> Double {
        let progress = try await MessageCollector(port: broker.port, filters: [Stage.progressTopic("filter-relay")])
        let stage = try Stage(broker, name: "filter-relay", input: "tracker/+/raw", leaves: ["points", "events"])
        try await progress.wait(description: "relay online") { !$0.isEmpty }
        await progress.close()
        let sink = try await MessageCollector(port: broker.port, filters: ["tracker/+/events"])
        let rate = try await Throughput.pump(broker, sink, Throughput.rawPayloads(count), leaf: "events", count: count)
        try await stage.retire(broker)
        return rate
    }

    /// A `relay-stage` process, started and retired.
    struct Stage {
        let name: String
        let process: ChildProcess

        static func clientID(_ name: String) -> String { "bench-stage-\(name)" }
        /// Where the stage says how many messages it has relayed.
        static func progressTopic(_ name: String) -> String { "tracker/_bench/\(name)" }

        init(_ broker: TestBroker, name: String, input: String, leaves: [String]) throws {
            self.name = name
            process = try ChildProcess(executable: ServiceHarness.binaryDirectory.appendingPathComponent("tracker-bench").path,
                                       arguments: ["relay-stage", "\(broker.port)", name, input] + leaves,
                                       logFile: broker.directory.appendingPathComponent("stage-\(name).log").path)
        }

        /// Kills it and ends its persistent session, so nothing queues for it.
        func retire(_ broker: TestBroker) async throws {
            process.kill(SIGKILL)
            _ = process.wait(timeout: 5)
            try await Throughput.forget(clientID: Self.clientID(name), broker, retainedHealth: nil)
        }
    }

    /// `tracker-bench relay-stage PORT NAME IN LEAF…`: a do-nothing stage of
    /// the constellation, run as its own process with a persistent session:
    /// every message on the filter IN is republished (QoS 1) on
    /// `tracker/{device}/{leaf}` for each LEAF (`live` at QoS 0, retained, as
    /// the track's live frames); with no LEAF it only counts.
    /// Every 1,000 messages it says how many on `tracker/_bench/NAME`.
    static func serveStage(port: Int32, name: String, input: String, leaves: [String]) async throws -> Never {
        let client = try MQTTClient(MQTTOptions(port: port, clientID: Stage.clientID(name), cleanStart: false, sessionExpirySec: 600))
        let seen = Mutex(0)
        client.setHandler { [unowned client] message in
            let device = message.topic.split(separator: "/")[1]
            for leaf in leaves {
                // `live` as the track publishes its live frames: QoS 0, retained.
                let frame = leaf == "live"
                try? client.publish(MQTTMessage(topic: "tracker/\(device)/\(leaf)", payload: message.payload,
                                                qos: frame ? .atMostOnce : .atLeastOnce, retain: frame))
            }
            let count = seen.withLock { $0 += 1; return $0 }
            if count % 1_000 == 0 { try? client.publish(MQTTMessage(topic: Stage.progressTopic(name), string: "\(count)")) }
        }
        try await client.connect()
        try await client.subscribe([input])
        try await client.publishAndWait(MQTTMessage(topic: Stage.progressTopic(name), string: "0"))
        while true { try await Task.sleep(for: .seconds(3600)) }
    }

    /// The product's hops and fan-out with nothing done at any of them:
    /// fixes → raw (gateway), raw → points + events (filter), points read by
    /// three (motion, track, uploader), the track's live frame for each. Fixes/s until all three have them all.
    /// Over `devices` devices, as the constellation it is held against: the
    /// broker's own cost grows with them (a topic and a retained frame each).
    static func measureConstellation(_ broker: TestBroker, count: Int, devices: Int = 32) async throws -> Double {
        let progress = try await MessageCollector(port: broker.port, filters: [Stage.progressTopic("+")])
        let stages = try [("gateway", "tracker/+/fixes", ["raw"]), ("filter", "tracker/+/raw", ["points", "events"]),
                          ("motion", "tracker/+/points", []), ("track", "tracker/+/points", ["live"]), ("uploader", "tracker/+/points", [])]
            .map { try Stage(broker, name: $0, input: $1, leaves: $2) }
        try await progress.wait(description: "stages online") { Set($0.map(\.topic)).count == stages.count }
        let publisher = try await TestClient.connect(port: broker.port)
        let start = ContinuousClock.now
        for i in 0..<count {
            try await publisher.publish(inFlightBelow: 2_000, MQTTMessage(topic: "tracker/relay\(i % devices)/fixes",
                                              string: String(format: Throughput.fixTemplate, 1_700_000_000.0 + Double(i / devices), 48.1, 11.5)))
        }
        let ends = ["motion", "track", "uploader"].map(Stage.progressTopic)
        try await progress.wait(timeout: 600, description: "every stage has every message") { messages in
            ends.allSatisfy { end in messages.contains { $0.topic == end && Int($0.string) ?? 0 >= count } }
        }
        let seconds = (ContinuousClock.now - start).seconds
        // The relays' retained frames go, so the product's run does not carry them.
        for device in 0..<min(count, devices) {
            try await publisher.publish(inFlightBelow: 2_000, MQTTMessage(topic: "tracker/relay\(device)/live", payload: [], retain: true))
        }
        await publisher.drain(timeout: .seconds(60))
        await publisher.disconnect()
        await progress.close()
        for stage in stages { try await stage.retire(broker) }
        return Double(count) / seconds
    }
}
