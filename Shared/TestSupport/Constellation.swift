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
    /// The customer's backend, once started.
    public private(set) var sink: HTTPSink?
    /// Where the uploader delivers in this constellation (for `configureSync`).
    public var sinkURL: String { "\(sink?.url ?? "http://127.0.0.1:9")/points" }
    /// The password of every account, when logins are on (services, their "-out" twins, trackerctl).
    public let passwords: [String: String]

    /// `config` per service is merged over a fast health interval.
    /// `persistentBroker: false` runs a broker that keeps nothing across a restart.
    /// With logins, `accounts` adds device or page accounts (name → password), and `aclFile` replaces `config/acl`.
    public init(logins: Bool = false, config: [String: [String: Any]] = [:], web: Bool = false, persistentBroker: Bool = true,
                accounts: [String: String] = [:], aclFile: String? = nil,
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
            passwords.merge(accounts) { _, added in added }
        }
        self.passwords = passwords
        broker = try TestBroker(persistent: persistentBroker,
                                accounts: logins ? .init(passwords, aclFile: aclFile ?? Repository.root.appendingPathComponent("config/acl").path) : nil,
                                messageSizeLimit: logins ? TestBroker.productMessageSizeLimit : nil,
                                webDirectory: web ? Repository.root.appendingPathComponent("web").path : nil)
        var services: [String: ServiceHarness] = [:]
        for service in Self.services {
            var settings = ServiceHarness.fastHealth
            for (key, value) in config[service] ?? [:] { settings[key] = value }
            let account = logins ? ["TRACKER_MQTT_USERNAME": "tracker-\(service)", "TRACKER_MQTT_PASSWORD": passwords["tracker-\(service)"]!] : [:]
            services[service] = try ServiceHarness(executable: "tracker-\(service)", broker: broker, config: settings,
                                                   environment: account, binaryDirectory: binaryDirectory)
        }
        self.services = services
    }

    /// Starts the sink and every service, and waits until each says online.
    public func start() async throws {
        sink = try HTTPSink(in: broker.directory)
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

    /// Points the uploader at this constellation's sink, retrying fast after a failure.
    public func syncToSink(batchSize: Int, with client: MQTTClient) async throws -> CommandReply {
        try await TestClient.command(client, device: "_fleet", "configureSync", args: .object([
            "url": .string(sinkURL), "batchSize": .number(Double(batchSize)),
            "retryBaseDelaySec": .number(0.05), "retryMaxDelaySec": .number(0.5)]))
    }

    /// Asks the uploader to sync (`syncNow`) until the sink holds `count`
    /// distinct points or `deadline` passes; returns what the sink holds then.
    public func syncUntilSinkHolds(_ count: Int, deadline: ContinuousClock.Instant, with client: MQTTClient) async throws -> [String: Int] {
        var points: [String: Int] = [:]
        while ContinuousClock.now < deadline {
            _ = try await TestClient.command(client, device: "_fleet", "syncNow", timeout: 30)
            points = sink!.points()
            if points.count >= count { break }
        }
        return points
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
        try await health.waitForNewestHealth(timeout: timeout, description: "\(names) online") { newest in
            let byService = Health.newestByService(newest)
            return names.allSatisfy { name in byService[name].map { $0.status == .online && $0.startedMs >= since } ?? false }
        }
    }

    /// Waits until a health message of `service` satisfies `condition`; returns that message.
    @discardableResult
    public func waitHealth(_ service: String, timeout: Double = 120, description: String,
                           until condition: @escaping @Sendable (Health) -> Bool) async throws -> Health {
        let health = try await collector(["tracker/_health/\(service)"])
        defer { Task { await health.close() } }
        return try await health.waitForHealth(timeout: timeout, description: description, until: condition)
    }

    /// Waits until the filter has judged `count` fixes since it started (`Health.judged`).
    @discardableResult
    public func waitJudged(_ count: Int64, timeout: Double = 120) async throws -> Health {
        try await waitHealth("filter", timeout: timeout, description: "the filter judged \(count) fixes") { $0.judged >= count }
    }

    /// Stops every service gracefully, then the sink.
    public func stop() {
        for service in Self.services.reversed() { services[service]?.stop() }
        sink?.stop()
    }
}
