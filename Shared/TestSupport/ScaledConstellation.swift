import Bus
import Foundation
import Model

/// The product as several instances of every service, with the devices
/// split into `partitions` (docs/scaling.md): one broker, one HTTP sink, and
/// per service any number of instances sharing one data directory, as they
/// would share a volume. Instances are named `a`, `b`, `c` …
public final class ScaledConstellation: @unchecked Sendable {
    public static let services = Constellation.services
    public let broker: TestBroker
    public private(set) var partitions: Int
    public let config: [String: Any]
    public private(set) var sink: HTTPSink?
    /// Service → instance name → its process.
    public private(set) var instances: [String: [String: ServiceHarness]] = [:]
    /// Each service's data directory, shared by its instances.
    public let dataDirectories: [String: URL]
    public var sinkURL: String { "\(sink?.url ?? "http://127.0.0.1:9")/points" }

    /// The password of every account, when logins are on (the services and trackerctl).
    public let passwords: [String: String]

    /// `persistentBroker: false` runs a broker that keeps nothing across a restart.
    /// `logins`: the product's broker config and ACL; the services log in with
    /// their accounts on the listener that keeps client ids (the operators').
    public init(partitions: Int, config: [String: Any] = [:], persistentBroker: Bool = true, logins: Bool = false) throws {
        self.partitions = partitions
        self.config = config
        var passwords: [String: String] = [:]
        if logins {
            for service in Self.services { passwords["tracker-\(service)"] = UUID().uuidString }
            passwords["trackerctl"] = UUID().uuidString
        }
        self.passwords = passwords
        broker = try TestBroker(persistent: persistentBroker, accounts: logins ? .init(
            passwords, aclFile: Repository.root.appendingPathComponent("config/acl").path, operators: Set(passwords.keys)) : nil,
                                messageSizeLimit: logins ? TestBroker.productMessageSizeLimit : nil)
        var directories: [String: URL] = [:]
        for service in Self.services {
            let directory = broker.directory.appendingPathComponent("data-\(service)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            directories[service] = directory
        }
        dataDirectories = directories
        sink = try HTTPSink(in: broker.directory)
    }

    /// The instance id of `name` of `service`: `tracker-{service}-{name}`.
    public static func instanceID(_ service: String, _ name: String) -> String { "tracker-\(service)-\(name)" }

    /// Starts instance `name` of `service` (again, after a stop or kill).
    public func start(_ service: String, _ name: String) throws {
        let harness = try instances[service]?[name] ?? process(service, name)
        instances[service, default: [:]][name] = harness
        try harness.start()
    }

    /// A process of instance `name` of `service`, not started: its settings,
    /// the service's shared data directory, its login.
    public func process(_ service: String, _ name: String) throws -> ServiceHarness {
        try ServiceHarness(
            executable: "tracker-\(service)", broker: broker,
            config: ServiceHarness.fastHealth.merging(config) { _, given in given }.merging(["partitions": partitions]) { _, p in p },
            // Unpartitioned, a service runs as one instance with the default id (its session's and store's name).
            environment: ["TRACKER_DATA_DIR": dataDirectories[service]!.path]
                .merging(partitions > 1 ? ["TRACKER_INSTANCE": Self.instanceID(service, name)] : [:]) { _, id in id }
                .merging(passwords.isEmpty ? [:] : ["TRACKER_MQTT_PORT": "\(broker.operatorPort)", "TRACKER_MQTT_USERNAME": "tracker-\(service)",
                                                    "TRACKER_MQTT_PASSWORD": passwords["tracker-\(service)"]!]) { _, login in login })
    }

    /// `tracker-{service} repartition --to count` for every service, whose
    /// instances must all be stopped; when every one succeeded, instances
    /// started after it run with `count` partitions. Each tool's exit code and output.
    public func repartition(to count: Int) throws -> [String: (code: Int32?, output: String)] {
        var results: [String: (code: Int32?, output: String)] = [:]
        defer {
            if results.values.allSatisfy({ $0.code == 0 }) {
                partitions = count
                instances = [:]
            }
        }
        for service in Self.services {
            let harness = try process(service, "repartition")
            let tool = try ChildProcess(executable: harness.executable,
                                        arguments: ["repartition", "--to", "\(count)", "--config", harness.configFile.path],
                                        environment: harness.environment,
                                        logFile: harness.dataDir.appendingPathComponent("repartition.log").path)
            results[service] = (tool.wait(timeout: 60), tool.log)
        }
        return results
    }

    /// Starts instance `name` of every service.
    public func startAll(_ name: String) throws {
        for service in Self.services { try start(service, name) }
    }

    public func kill9(_ service: String, _ name: String) { instances[service]?[name]?.kill9() }

    /// SIGTERM: a graceful stop, which hands its partitions over.
    @discardableResult
    public func stop(_ service: String, _ name: String) -> Int32? { instances[service]?[name]?.stop() }

    public func stopAll() {
        for (_, byName) in instances { for (_, harness) in byName { harness.stop() } }
        sink?.stop()
    }

    /// A client on the broker: with logins, trackerctl on the operators' listener.
    public func client() async throws -> MQTTClient {
        let client = try MQTTClient(MQTTOptions(port: passwords.isEmpty ? broker.port : broker.operatorPort,
                                                clientID: "scaled-test-\(UUID().uuidString.prefix(8))",
                                                username: passwords.isEmpty ? nil : "trackerctl", password: passwords["trackerctl"]))
        try await client.connect()
        return client
    }

    /// `trackerctl ARGUMENTS` against this broker, logged in like `client()`: its exit code and output.
    public func trackerctl(_ arguments: [String]) throws -> (code: Int32?, output: String) {
        var environment = ProcessInfo.processInfo.environment
        environment["TRACKER_MQTT_PORT"] = "\(passwords.isEmpty ? broker.port : broker.operatorPort)"
        if let password = passwords["trackerctl"] {
            environment["TRACKER_MQTT_USERNAME"] = "trackerctl"
            environment["TRACKER_MQTT_PASSWORD"] = password
        }
        let process = try ChildProcess(executable: ServiceHarness.binaryDirectory.appendingPathComponent("trackerctl").path,
                                       arguments: arguments, environment: environment,
                                       logFile: broker.directory.appendingPathComponent("ctl-\(UUID().uuidString.prefix(6)).log").path)
        let code = process.wait(timeout: 30)
        return (code, process.log)
    }

    /// A collector of `filters`, logged in like `client()`.
    public func collector(_ filters: [String]) async throws -> MessageCollector {
        try await MessageCollector(port: passwords.isEmpty ? broker.port : broker.operatorPort, filters: filters,
                                   username: passwords.isEmpty ? nil : "trackerctl", password: passwords["trackerctl"])
    }

    /// Waits until the instances of `service` have taken `count` messages in all.
    public func waitProcessed(_ service: String, _ count: Int64, timeout: Double = 60) async throws {
        let collector = try await collector(["tracker/_health/\(service)/+"])
        defer { Task { await collector.close() } }
        try await collector.waitForNewestHealth(timeout: timeout, description: "\(service) took \(count) messages") { newest in
            newest.values.reduce(0) { $0 + $1.processed } >= count
        }
    }

    /// The end of each instance's log of `service`, by name, for a failing test to show.
    public func logs(_ service: String, suffix: Int) -> String {
        (instances[service] ?? [:]).sorted { $0.key < $1.key }.map { "\($0.key): \($0.value.log.suffix(suffix))" }.joined(separator: "\n")
    }

    /// The newest health of each of the `instances` instances of `service`.
    public func health(_ service: String, instances: Int) async throws -> [String: Health] {
        let collector = try await collector(["tracker/_health/\(service)/+"])
        defer { Task { await collector.close() } }
        return try await collector.waitForNewestHealth(timeout: 10, description: "\(service)'s health") { $0.count >= instances }
    }

    /// `waitShared` for every service, in turn.
    public func waitEveryServiceShared(among names: [String], timeout: Double = 60) async throws {
        for service in Self.services { try await waitShared(service, among: names, timeout: timeout) }
    }

    /// Waits until the online instances of `service` are exactly `names`,
    /// sharing every partition once and one running the ingress, each within
    /// one of an even share; returns how long that took.
    @discardableResult
    public func waitShared(_ service: String, among names: [String], timeout: Double = 60) async throws -> Duration {
        let started = ContinuousClock.now
        let ids = Set(names.map { Self.instanceID(service, $0) })
        let collector = try await collector(["tracker/_health/\(service)/+"])
        defer { Task { await collector.close() } }
        let count = partitions
        try await collector.waitForNewestHealth(timeout: timeout, description: "\(service)'s partitions shared by \(names.sorted())") { newest in
            let online = newest.filter { $0.value.status == .online }
            guard Set(online.keys) == ids else { return false }
            let owned = online.values.flatMap { $0.partitions ?? [] }
            // The ingress counts as a share of the work, like a partition.
            let shares = online.values.map { ($0.partitions?.count ?? 0) + ($0.ingress == true ? 1 : 0) }
            return owned.sorted() == Array(0..<count) && shares.max()! - shares.min()! <= 1
                && online.values.filter { $0.ingress == true }.count == 1
        }
        return ContinuousClock.now - started
    }
}
