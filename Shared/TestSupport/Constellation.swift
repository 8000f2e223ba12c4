import Bus
import Foundation
import Model
#if canImport(Glibc)
import Glibc
#endif

/// The whole product as real processes: a broker (persistent, optionally
/// with the product's logins and ACL), the five services and a local HTTP
/// sink for the uploader. For end-to-end and chaos tests and benchmarks.
public final class Constellation: @unchecked Sendable {
    public static let services = ["gateway", "filter", "motion", "track", "uploader"]
    public let broker: TestBroker
    public let services: [String: ServiceHarness]
    public let sinkPort: Int32
    public let sinkFile: URL
    private var sink: ChildProcess?
    /// The password of every account, when logins are on (services, their "-out" twins, trackerctl).
    public let passwords: [String: String]

    /// The repository's root (this file is Shared/TestSupport/Constellation.swift).
    public static var root: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    }

    /// `config` per service is merged over a fast health interval.
    public init(logins: Bool = false, config: [String: [String: Any]] = [:], web: Bool = false,
                binaryDirectory: URL = ServiceHarness.binaryDirectory) throws {
        var passwords: [String: String] = [:]
        if logins {
            for service in Self.services {
                let secret = UUID().uuidString
                passwords["tracker-\(service)"] = secret
                passwords["tracker-\(service)-out"] = secret
            }
            passwords["trackerctl"] = UUID().uuidString
            passwords["tracker-map"] = UUID().uuidString
        }
        self.passwords = passwords
        broker = try TestBroker(persistent: true,
                                accounts: logins ? .init(passwords, aclFile: Self.root.appendingPathComponent("config/acl").path) : nil,
                                messageSizeLimit: logins ? 2_097_152 : nil,
                                webDirectory: web ? Self.root.appendingPathComponent("web").path : nil)
        var services: [String: ServiceHarness] = [:]
        for service in Self.services {
            var settings: [String: Any] = ["healthIntervalSec": 0.2]
            for (key, value) in config[service] ?? [:] { settings[key] = value }
            let account = logins ? ["TRACKER_MQTT_USERNAME": "tracker-\(service)", "TRACKER_MQTT_PASSWORD": passwords["tracker-\(service)"]!] : [:]
            services[service] = try ServiceHarness(executable: "tracker-\(service)", broker: broker, config: settings,
                                                   environment: account, binaryDirectory: binaryDirectory)
        }
        self.services = services
        sinkPort = try freePort()
        sinkFile = broker.directory.appendingPathComponent("sink.jsonl")
    }

    /// Starts the sink and every service, and waits until each says online.
    public func start() async throws {
        sink = try ChildProcess(executable: "/usr/bin/python3",
                                arguments: [Self.root.appendingPathComponent("scripts/http-sink.py").path, "\(sinkPort)", sinkFile.path],
                                logFile: broker.directory.appendingPathComponent("sink.log").path)
        guard waitForPort(sinkPort, timeout: 10) else { throw TestSupportError("the HTTP sink did not start") }
        for service in Self.services { try services[service]!.start() }
        try await waitOnline(Self.services)
    }

    /// A client on the operator's listener (as trackerctl when logins are on).
    public func operatorClient() async throws -> MQTTClient {
        let client = try MQTTClient(MQTTOptions(port: broker.operatorPort, clientID: "trackerctl-test-\(UUID().uuidString.prefix(8))",
                                                cleanStart: true, username: passwords.isEmpty ? nil : "trackerctl",
                                                password: passwords["trackerctl"]))
        try await client.connect()
        return client
    }

    /// A collector on the operator's listener.
    public func collector(_ filters: [String]) async throws -> MessageCollector {
        try await MessageCollector(port: broker.operatorPort, filters: filters, username: passwords.isEmpty ? nil : "trackerctl",
                                   password: passwords["trackerctl"])
    }

    /// Waits until the newest health of each named service says online and was
    /// published after `since` (so a restarted service's stale retained
    /// message does not count).
    public func waitOnline(_ names: [String], since: Int64 = 0, timeout: Double = 60) async throws {
        let health = try await collector(["tracker/_health/+"])
        defer { Task { await health.close() } }
        try await health.wait(timeout: timeout, description: "\(names) online") { messages in
            var newest: [String: Health] = [:]
            for m in messages {
                guard let h = try? JSONCoding.decoder.decode(Health.self, from: Data(m.payload)) else { continue }
                newest[h.service] = h
            }
            return names.allSatisfy { name in newest[name].map { $0.status == .online && $0.startedMs >= since } ?? false }
        }
    }

    /// Waits until a health message of `service` satisfies `condition`.
    public func waitHealth(_ service: String, timeout: Double = 120, description: String,
                           until condition: @escaping @Sendable (Health) -> Bool) async throws {
        let health = try await collector(["tracker/_health/\(service)"])
        defer { Task { await health.close() } }
        try await health.wait(timeout: timeout, description: description) { messages in
            messages.contains { m in (try? JSONCoding.decoder.decode(Health.self, from: Data(m.payload))).map(condition) ?? false }
        }
    }

    /// Waits until the filter has judged `count` fixes since it started (its accepted + rejected counters).
    public func waitJudged(_ count: Int64, timeout: Double = 120) async throws {
        try await waitHealth("filter", timeout: timeout, description: "the filter judged \(count) fixes") { health in
            (health.counters?["accepted"] ?? 0) + (health.counters?["rejected"] ?? 0) >= count
        }
    }

    /// Every (device, seq) the sink received, with how many times.
    public func sinkPoints() throws -> [String: Int] {
        guard let text = try? String(contentsOf: sinkFile, encoding: .utf8) else { return [:] }
        var seen: [String: Int] = [:]
        for line in text.split(separator: "\n") {
            guard let body = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                  let points = body["points"] as? [[String: Any]] else { continue }
            for p in points {
                if let device = p["device"] as? String, let seq = p["seq"] as? Int { seen["\(device):\(seq)", default: 0] += 1 }
            }
        }
        return seen
    }

    /// Stops every service gracefully, then the sink.
    public func stop() {
        for service in Self.services.reversed() { services[service]?.stop() }
        sink?.kill(SIGTERM)
        _ = sink?.wait(timeout: 5)
    }

    deinit { sink?.kill(SIGKILL) }
}
