import Bus
import Foundation
import Model
import Runtime

struct UsageError: Error { let message: String; init(_ m: String) { message = m } }

/// Minimal argument handling: options anywhere, positionals in order.
struct Arguments {
    private var items: [String]
    init(_ items: [String]) { self.items = items }

    mutating func value(_ option: String) -> String? {
        guard let i = items.firstIndex(of: option), i + 1 < items.count else { return nil }
        let value = items[i + 1]
        items.removeSubrange(i...(i + 1))
        return value
    }

    mutating func flag(_ option: String) -> Bool {
        guard let i = items.firstIndex(of: option) else { return false }
        items.remove(at: i)
        return true
    }

    mutating func int(_ option: String) throws -> Int? {
        guard let text = value(option) else { return nil }
        guard let n = Int(text), n > 0 else { throw UsageError("\(option): expected a positive integer, got '\(text)'") }
        return n
    }

    mutating func double(_ option: String) throws -> Double? {
        guard let text = value(option) else { return nil }
        guard let n = Double(text), n >= 0, n.isFinite else { throw UsageError("\(option): expected a number ≥ 0, got '\(text)'") }
        return n
    }

    mutating func positional() -> String? {
        guard let i = items.firstIndex(where: { !$0.hasPrefix("--") }) else { return nil }
        return items.remove(at: i)
    }

    func finish() throws {
        if let extra = items.first { throw UsageError("unexpected argument '\(extra)'") }
    }
}

/// Broker address and topic prefix from options or the environment.
struct Connection {
    let host: String
    let port: Int32
    let username: String?
    let password: String?
    let topics: Topics

    init(_ args: inout Arguments) throws {
        let env = ProcessInfo.processInfo.environment
        host = args.value("--host") ?? env["TRACKER_MQTT_HOST"] ?? "127.0.0.1"
        let portText = args.value("--port") ?? env["TRACKER_MQTT_PORT"] ?? "1883"
        guard let port = Int32(portText), (1...65_535).contains(port) else { throw UsageError("--port: expected 1…65535, got '\(portText)'") }
        self.port = port
        username = env["TRACKER_MQTT_USERNAME"]
        password = try env["TRACKER_MQTT_PASSWORD"] ?? env["TRACKER_MQTT_PASSWORD_FILE"].map { path in
            do { return try SettingsReader.password(fromFile: path) } catch { throw UsageError("\(error)") }
        }
        topics = Topics(prefix: args.value("--prefix") ?? env["TRACKER_TOPIC_PREFIX"] ?? "tracker")
    }

    func connect(name: String = "replay", protocolVersion: MQTTOptions.ProtocolVersion = .v5) async throws -> MQTTClient {
        let id = "trackerctl-\(name)-\(UUID().uuidString.prefix(8).lowercased())"
        let client = try MQTTClient(MQTTOptions(host: host, port: port, clientID: id, cleanStart: true,
                                                username: username, password: password, protocolVersion: protocolVersion))
        try await client.connect()
        return client
    }
}
