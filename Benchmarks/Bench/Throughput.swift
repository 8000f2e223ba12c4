import Bus
import FilterCore
import Foundation
import Synchronization
import Model
import TestSupport

/// Throughput benchmarks, each reported against the broker's own QoS 1
/// ceiling measured in the same run on the same machine.
enum Throughput {
    static let fixTemplate = #"{"t":%.3f,"lat":%.6f,"lon":%.6f,"acc":10,"speed":1.54,"course":263.6}"#

    /// Publishes every payload (QoS 1, at most 1,000 in flight) and returns
    /// messages per second until `count` arrived on topics ending `/leaf`
    /// (or, with `marker`, `count` messages containing it).
    static func pump(_ broker: TestBroker, _ sink: MessageCollector, _ payloads: [(topic: String, payload: [UInt8])],
                     leaf: String = "events", marker: String? = nil, count: Int) async throws -> Double {
        let publisher = try await TestClient.connect(port: broker.port)
        let start = ContinuousClock.now
        for p in payloads {
            try await publisher.publish(inFlightBelow: 1_000, MQTTMessage(topic: p.topic, payload: p.payload))
        }
        if let marker {
            // Counted as messages arrive: a scan of everything per message would make the sink the bottleneck.
            let seen = Mutex((scanned: 0, found: 0)), bytes = Array(marker.utf8)
            try await sink.wait(timeout: 300, description: "\(count) × \(marker)") { all in
                seen.withLock { s in
                    for m in all[s.scanned...] where m.payload.firstRange(of: bytes) != nil { s.found += 1 }
                    s.scanned = all.count
                    return s.found >= count
                }
            }
        } else {
            try await sink.wait(count: count, topicSuffix: "/\(leaf)", timeout: 300)
        }
        let seconds = (ContinuousClock.now - start).seconds
        let processed = Int64(marker == nil ? count : payloads.count)
        if marker != nil { print("  (\(sink.messages.filter { !$0.topic.contains("_health") }.count) events out for \(payloads.count) messages in)") }
        // The service's own view: how many messages each commit carried.
        _ = try? await sink.wait(timeout: 3, description: "final health") { all in
            all.contains { ((try? JSONCoding.decoder.decode(Health.self, from: Data($0.payload)))?.processed ?? 0) >= processed }
        }
        if let health = sink.decoded(Health.self, topicSuffix: "/" + (sink.messages.last { $0.topic.contains("_health") }?.topic.split(separator: "/").last.map(String.init) ?? "")).last,
           let commits = health.counters?["commits"], commits > 0 {
            print(String(format: "  (%@: %lld messages in %lld commits, %.1f per commit; input held back %lld times)", health.service as NSString,
                         health.processed, commits, Double(health.processed) / Double(commits), health.counters?["inputHeld"] ?? 0))
        }
        await sink.close()
        await publisher.disconnect()
        return Double(payloads.count) / seconds
    }

    /// One publisher to one subscriber, QoS 1, ~100-byte fix payloads: the ceiling.
    static func brokerCeiling(_ broker: TestBroker, count: Int) async throws -> Double {
        let sink = try await MessageCollector(port: broker.port, filters: ["bench/ceiling"])
        let payloads = (0..<count).map { i in
            (topic: "bench/ceiling", payload: Array(String(format: fixTemplate, 1_700_000_000.0 + Double(i), 48.1, 11.5).utf8))
        }
        return try await pump(broker, sink, payloads, leaf: "ceiling", count: count)
    }

    /// Which build of a service to measure, and how.
    struct Variant {
        var binaries = ServiceHarness.binaryDirectory
        var environment: [String: String] = [:]
        static let standard = Variant()
        /// Foundation's JSON coders instead of the hand-written fast paths.
        static let foundationJSON = Variant(environment: ["TRACKER_JSON": "foundation"])
    }

    /// Fixes published on `tracker/{d}/fixes` until the same number came out on `raw`.
    static func gateway(_ broker: TestBroker, count: Int, variant: Variant = .standard) async throws -> Double {
        let devices = 8
        let payloads = (0..<count).map { i in
            (topic: "tracker/bench\(i % devices)/fixes",
             payload: Array(String(format: fixTemplate, 1_700_000_000.0 + Double(i / devices), 48.1 + Double(i) * 1e-6, 11.5).utf8))
        }
        return try await throughGateway(broker, payloads, fixes: count, variant: variant)
    }

    /// The same, with devices sending their fixes `batch` at a time as JSON
    /// arrays (as the contract allows and phones do after buffering): one
    /// broker hop in for every `batch` out. Returns fixes per second.
    static func gatewayBatched(_ broker: TestBroker, count: Int, batch: Int) async throws -> Double {
        let devices = 8
        let messages = count / batch
        let payloads = (0..<messages).map { m in
            let fixes = (0..<batch).map { k -> String in
                let t: Double = 1_700_000_000.0 + Double((m / devices) * batch + k)
                let lat: Double = 48.1 + Double(m * batch + k) * 1e-6
                return String(format: fixTemplate, t, lat, 11.5)
            }
            return (topic: "tracker/batch\(m % devices)/fixes", payload: Array(("[" + fixes.joined(separator: ",") + "]").utf8))
        }
        return try await throughGateway(broker, payloads, fixes: messages * batch)
    }

    /// A fresh gateway, the payloads through it, and the rate until `fixes` came out on `raw`.
    private static func throughGateway(_ broker: TestBroker, _ payloads: [(topic: String, payload: [UInt8])],
                                       fixes: Int, variant: Variant = .standard) async throws -> Double {
        let gateway = try await launch("gateway", broker, listening: ["tracker/+/raw"], variant: variant)
        let rate = try await pump(broker, gateway.sink, payloads, leaf: "raw", count: fixes)
        try await gateway.finish(messages: payloads.count, broker)
        return rate
    }

    /// Raw fixes published on `tracker/{d}/raw` until every verdict came out as an event.
    static func filter(_ broker: TestBroker, count: Int, variant: Variant = .standard) async throws -> Double {
        let filter = try await launch("filter", broker, listening: ["tracker/+/events"], variant: variant)
        let rate = try await pump(broker, filter.sink, rawPayloads(count), leaf: "events", count: count)
        try await filter.finish(messages: count, broker)
        return rate
    }

    /// Catching up after downtime: `count` raw fixes queued at the broker
    /// while the filter is stopped, then the time from its start until every
    /// verdict is out. Nothing else runs meanwhile, so the service works in
    /// large batches: the steadiest measure of what it costs per message.
    static func filterBacklog(_ broker: TestBroker, count: Int, variant: Variant = .standard, doppler: Bool = true) async throws -> Double {
        // Started once, to create its persistent session and subscriptions.
        let measured = try await launch("filter", broker, listening: ["tracker/+/events"], variant: variant)
        let (filter, sink) = (measured.service, measured.sink)
        filter.stop()
        let publisher = try await TestClient.connect(port: broker.port)
        for (topic, payload) in rawPayloads(count, doppler: doppler) { try publisher.publish(MQTTMessage(topic: topic, payload: payload)) }
        await publisher.drain(timeout: .seconds(120))
        await publisher.disconnect()
        let start = ContinuousClock.now
        try filter.start()
        try await sink.wait(count: count, topicSuffix: "/events", timeout: 300)
        let seconds = (ContinuousClock.now - start).seconds
        try await measured.finish(messages: count, broker)
        await sink.close()
        return Double(count) / seconds
    }

    /// A service started for one measure: quiet logs, its own client id, and
    /// `sink` listening on `filters` and its health from before it is online.
    struct Measured {
        let service: ServiceHarness
        let sink: MessageCollector
        let instance: String

        /// Its CPU per message, then it stops and its session is forgotten.
        func finish(messages: Int, _ broker: TestBroker) async throws {
            printCPU(service, messages: messages)
            try await retire(service, id: instance, broker)
        }
    }

    /// Starts `name` (`gateway`, `filter`, …) with `config` over the quiet defaults and waits until it is online.
    static func launch(_ name: String, _ broker: TestBroker, listening filters: [String], config: [String: Any] = [:],
                       variant: Variant = .standard) async throws -> Measured {
        let instance = "\(name)-\(UUID().uuidString.prefix(6))"
        let defaults: [String: Any] = ["logLevel": "warning", "healthIntervalSec": 0.5, "instance": instance]
        let service = try ServiceHarness(executable: "tracker-\(name)", broker: broker, config: defaults.merging(config) { _, new in new },
                                         environment: variant.environment, binaryDirectory: variant.binaries)
        try service.start()
        let sink = try await MessageCollector(port: broker.port, filters: filters + ["tracker/_health/\(name)"])
        // "online" from this instance: a previous one's retained health says offline.
        try await sink.wait(description: "\(name) online") { $0.contains { $0.string.contains(#""status":"online""#) } }
        return Measured(service: service, sink: sink, instance: instance)
    }

    /// Stops a measured service and ends its persistent session at the
    /// broker: a session left behind keeps queueing every later run's
    /// messages for a subscriber that is gone, and slows the broker for the
    /// measures that follow (it once made 10-fix batches look 8× slower).
    static func retire(_ service: ServiceHarness, id: String, _ broker: TestBroker) async throws {
        service.stop()
        try await forget(clientID: id, broker)
    }

    /// Ends a client's persistent session: a clean start under its id, then goodbye.
    static func forget(clientID: String, _ broker: TestBroker, retainedHealth: String? = nil) async throws {
        let cleaner = try MQTTClient(MQTTOptions(port: broker.port, clientID: clientID, cleanStart: true))
        try await cleaner.connect()
        // A retained "online" of a killed relay would let the next run start before its relay subscribed.
        if let retainedHealth { try await cleaner.publishAndWait(MQTTMessage(topic: retainedHealth, payload: [], retain: true)) }
        await cleaner.disconnect()
    }

    /// Raw fixes of the noisy MTV drive over 8 devices, numbered as the gateway does.
    static func rawPayloads(_ count: Int, doppler: Bool = true) -> [(topic: String, payload: [UInt8])] {
        let noisy = NoiseGenerator(seed: 1).apply(to: (try? Fixtures.fixes("mtv-drive-truth.jsonl")) ?? [])
        let devices = 8
        return (0..<count).map { i -> (topic: String, payload: [UInt8]) in
            let device = DeviceID("fbench\(i % devices)")!
            let lap = i / devices / noisy.count
            let s = noisy[(i / devices) % noisy.count]
            let raw = RawFix(device: device, seq: Int64(i / devices + 1), sessionID: "s",
                             timeMs: s.fix.timeMs + Int64(lap) * 10_000_000, receivedMs: 0, source: .device,
                             latitude: s.fix.lat, longitude: s.fix.lon, accuracyM: s.fix.acc,
                             speedMps: doppler ? s.fix.speed : nil, courseDeg: doppler ? s.fix.course : nil)
            return ("tracker/\(device)/raw", JSONCoding.bytes(raw))
        }
    }

    /// The service process's own CPU time per message it took (user + system,
    /// from /proc): what the service costs, apart from the broker's share.
    static func printCPU(_ service: ServiceHarness, messages: Int) {
        guard let cpu = service.process?.cpu else { return }
        printCPU(user: cpu.user, system: cpu.system, messages: messages)
    }

    /// Fixes a device a second apart sends before its first is judged: the
    /// filter holds it for the fixes after it over 8 s. A warm-up of as many
    /// leaves no device's first fix to the timed run.
    static let firstFixWarmup = 9

    /// CPU seconds spent on `messages` messages, per message.
    static func printCPU(user: Double, system: Double, messages: Int) {
        print(String(format: "  (CPU: %.1f µs per message, %.1f user + %.1f system)",
                     (user + system) / Double(messages) * 1e6, user / Double(messages) * 1e6, system / Double(messages) * 1e6))
    }

    /// FilterCore alone on one core: judgments per second over the noisy drive.
    static func filterCore(iterations: Int) throws -> Double {
        let truth = try Fixtures.fixes("mtv-drive-truth.jsonl")
        let noisy = NoiseGenerator(seed: 1).apply(to: truth).enumerated().map { i, s in FilterInput(s.fix, seq: Int64(i + 1)) }
        let core = FilterCore()
        var accepted = 0
        let start = ContinuousClock.now
        var judged = 0
        while judged < iterations {
            var state = DeviceFilterState()
            for fix in noisy { if core.judge(fix, state: &state).point != nil { accepted += 1 } }
            judged += noisy.count
        }
        let seconds = (ContinuousClock.now - start).seconds
        precondition(accepted > 0)
        return Double(judged) / seconds
    }
}

