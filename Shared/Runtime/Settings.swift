import FoundationEssentials
import Glibc
import Store
import TrackerLog
import Model

/// A setting that stops a service at start, with the setting's name.
public struct ConfigError: Error, CustomStringConvertible, Sendable {
    public let setting: String
    public let problem: String
    public init(_ setting: String, _ problem: String) { self.setting = setting; self.problem = problem }
    public var description: String { "invalid setting '\(setting)': \(problem)" }
}

/// Reads a service's settings: `config/{service}.json` (or `--config FILE`),
/// then the `TRACKER_*` environment variables, which win. Every getter
/// checks type and range and names the setting when it refuses one; keys
/// nobody read are refused too, so a typo never passes silently.
public final class SettingsReader {
    private var values: [String: JSONValue]
    private var read: Set<String> = []
    public let source: String

    public init(values: [String: JSONValue], source: String) {
        self.values = values
        self.source = source
    }

    /// Loads the file (absent default file = all defaults) and applies the environment.
    public static func load(service: String, arguments: [String], environment: [String: String]) throws -> SettingsReader {
        var path = "config/\(service).json"
        var explicit = false
        if let index = arguments.firstIndex(of: "--config") {
            guard index + 1 < arguments.count else { throw ConfigError("--config", "needs a file path") }
            path = arguments[index + 1]
            explicit = true
        }
        var values: [String: JSONValue] = [:]
        if let data = FileManager.default.contents(atPath: path) {
            let parsed: JSONValue
            do { parsed = try JSONCoding.decoder.decode(JSONValue.self, from: data) } catch {
                throw ConfigError(path, "not valid JSON: \(Self.syntaxProblem(in: data) ?? DecodingErrorText.describe(any: error))")
            }
            guard case .object(let object) = parsed else { throw ConfigError(path, "not a JSON object") }
            values = object
        } else if explicit {
            throw ConfigError("--config", "cannot read \(path)")
        }
        let reader = SettingsReader(values: values, source: path)
        try reader.applyEnvironment(environment, service: service)
        return reader
    }

    static let environmentKeys: [(variable: String, key: String, numeric: Bool)] = [
        ("TRACKER_MQTT_HOST", "mqttHost", false), ("TRACKER_MQTT_PORT", "mqttPort", true),
        ("TRACKER_MQTT_USERNAME", "mqttUsername", false), ("TRACKER_MQTT_PASSWORD", "mqttPassword", false),
        ("TRACKER_DATA_DIR", "dataDir", false), ("TRACKER_TOPIC_PREFIX", "topicPrefix", false),
        ("TRACKER_INSTANCE", "instance", false), ("TRACKER_PARTITIONS", "partitions", true),
    ]
    /// One service's own variables, read by that service only (another would refuse them as unknown).
    static let serviceEnvironmentKeys: [String: [(variable: String, key: String, numeric: Bool)]] = [
        // tracker-http's port, and the broker listeners where it logs in as the requesting accounts.
        "http": [("TRACKER_HTTP_PORT", "httpPort", true), ("TRACKER_GATE_PORT", "gatePort", true),
                 ("TRACKER_OPERATOR_PORT", "operatorPort", true)],
    ]

    func applyEnvironment(_ environment: [String: String], service: String = "") throws {
        // A password from a file (a container's secret), so it is in no environment listing.
        if let path = environment["TRACKER_MQTT_PASSWORD_FILE"], environment["TRACKER_MQTT_PASSWORD"] == nil {
            values["mqttPassword"] = .string(try Self.password(fromFile: path))
        }
        for (variable, key, numeric) in Self.environmentKeys + (Self.serviceEnvironmentKeys[service] ?? []) {
            guard let raw = environment[variable] else { continue }
            if numeric {
                guard let number = Double(raw) else { throw ConfigError(variable, "expected a number, got '\(raw)'") }
                values[key] = .number(number)
            } else {
                values[key] = .string(raw)
            }
        }
    }

    /// Where a file's JSON breaks, as "line L, column C: …" (both from 1, the column in bytes).
    static func syntaxProblem(in data: Data) -> String? {
        guard let problem = JSONSyntax.firstProblem(in: data) else { return nil }
        var line = 1, column = 1
        for byte in data.prefix(problem.offset) {
            if byte == UInt8(ascii: "\n") { line += 1; column = 1 } else { column += 1 }
        }
        return "line \(line), column \(column): \(problem.message)"
    }

    /// The first line of a password file.
    public static func password(fromFile path: String) throws -> String {
        let text: String
        do { text = try String(contentsOfFile: path, encoding: .utf8) } catch {
            throw ConfigError("TRACKER_MQTT_PASSWORD_FILE", "cannot read \(path): \(ErrorText.describe(error))")
        }
        guard let line = text.split(whereSeparator: \.isNewline).first, !line.isEmpty else {
            throw ConfigError("TRACKER_MQTT_PASSWORD_FILE", "\(path) holds no password (its first line is empty)")
        }
        return String(line)
    }

    public func string(_ key: String, default fallback: String) throws -> String {
        try optionalString(key) ?? fallback
    }

    public func optionalString(_ key: String) throws -> String? {
        read.insert(key)
        guard let value = values[key], value != .null else { return nil }
        guard let s = value.stringValue else { throw ConfigError(key, "expected a string, got \(JSONCoding.string(value))") }
        return s
    }

    public func choice(_ key: String, default fallback: String, among options: [String]) throws -> String {
        let value = try string(key, default: fallback)
        guard options.contains(value) else {
            throw ConfigError(key, "expected one of \(options.joined(separator: ", ")), got '\(value)'")
        }
        return value
    }

    public func double(_ key: String, default fallback: Double, in range: ClosedRange<Double>) throws -> Double {
        read.insert(key)
        guard let value = values[key], value != .null else { return fallback }
        guard let d = value.doubleValue, d.isFinite else { throw ConfigError(key, "expected a number, got \(JSONCoding.string(value))") }
        guard range.contains(d) else { throw ConfigError(key, "must be within \(range.lowerBound)…\(range.upperBound), got \(d)") }
        return d
    }

    public func optionalDouble(_ key: String, in range: ClosedRange<Double>) throws -> Double? {
        guard values[key] != nil, values[key] != .null else { read.insert(key); return nil }
        return try double(key, default: 0, in: range)
    }

    public func int(_ key: String, default fallback: Int, in range: ClosedRange<Int>) throws -> Int {
        let d = try double(key, default: Double(fallback), in: Double(range.lowerBound)...Double(range.upperBound))
        guard d.rounded() == d else { throw ConfigError(key, "expected an integer, got \(d)") }
        return Int(d)
    }

    /// A setting that is a whole JSON value (an object of a service's own), unchecked here.
    public func json(_ key: String) -> JSONValue? {
        read.insert(key)
        guard let value = values[key], value != .null else { return nil }
        return value
    }

    public func bool(_ key: String, default fallback: Bool) throws -> Bool {
        read.insert(key)
        guard let value = values[key], value != .null else { return fallback }
        guard let b = value.boolValue else { throw ConfigError(key, "expected true or false, got \(JSONCoding.string(value))") }
        return b
    }

    /// Refuses keys that no getter asked for.
    public func rejectUnknownKeys() throws {
        let unknown = Set(values.keys).subtracting(read).sorted()
        if let first = unknown.first {
            throw ConfigError(first, "unknown setting in \(source)")
        }
    }
}

/// The settings every service shares.
public struct CommonSettings: Sendable {
    public var mqttHost: String
    public var mqttPort: Int
    public var mqttUsername: String?
    public var mqttPassword: String?
    public var dataDir: String
    public var topicPrefix: String
    /// The first level of the OwnTracks topics the gateway takes (`owntracks`).
    public var ownTracksTopic: String
    /// Instance id: the MQTT client id and health identity. Defaults to the
    /// service name; with partitions, to the service name and the host's.
    public var instance: String
    public var healthIntervalSec: Double
    public var logLevel: LogLevel
    /// Devices whose state a service keeps in memory (see `DeviceCache` for which leave first).
    public var deviceCacheCapacity: Int
    /// Memory for device state, in MB (what each device takes, from its layout and stored size); beyond it, state lives on disk.
    public var cacheBudgetMB: Int
    /// Queries (reads of stored data) waiting at most; beyond, the reply is `busy`.
    public var queryBacklog: Int
    /// The largest command reply; a longer page stops short with `nextOffset`.
    public var maxReplyBytes: Int
    /// Messages waiting for the broker at most before input is held back.
    public var outputBacklogMax: Int
    /// SQLite's page cache for the service's store, in MB.
    public var sqliteCacheMB: Int
    /// How gaps in the internal streams are repaired (`repairTimeoutSec`, `repairRetrySec`).
    public var repair: RepairSettings
    /// Topic prefixes outside `topicPrefix` that command replies may be sent
    /// to (comma-separated; none by default): the service's output account
    /// must be allowed to publish there, and only the asker should read it.
    public var replyTopicPrefixes: [String]
    /// Partitions the devices are split into (the same in every instance of
    /// every service); 1 runs the service as one instance, as always.
    public var partitions: Int
    /// How long a partition's lease holds unless renewed: the longest a
    /// dead instance's partitions wait before a survivor takes them.
    public var leaseSec: Double

    /// The machine's name up to its first dot (a container's or a pod's own);
    /// read only where it names an instance.
    static var hostName: String { ProcessInfo.processInfo.hostName.split(separator: ".").first.map(String.init) ?? "host" }

    public init(service: String, _ reader: SettingsReader) throws {
        mqttHost = try reader.string("mqttHost", default: "127.0.0.1")
        mqttPort = try reader.int("mqttPort", default: 1883, in: 1...65_535)
        mqttUsername = try reader.optionalString("mqttUsername")
        mqttPassword = try reader.optionalString("mqttPassword")
        dataDir = try reader.string("dataDir", default: "./data")
        topicPrefix = try reader.string("topicPrefix", default: "tracker")
        guard !topicPrefix.isEmpty, !topicPrefix.contains(where: { "/+#".contains($0) }) else {
            throw ConfigError("topicPrefix", "must be one non-empty topic level without / + #, got '\(topicPrefix)'")
        }
        ownTracksTopic = try reader.string("ownTracksTopic", default: "owntracks")
        guard !ownTracksTopic.isEmpty, !ownTracksTopic.contains(where: { "/+#".contains($0) }), ownTracksTopic != topicPrefix else {
            throw ConfigError("ownTracksTopic", "must be one non-empty topic level without / + #, other than topicPrefix, got '\(ownTracksTopic)'")
        }
        partitions = try reader.int("partitions", default: 1, in: 1...1_024)
        // Instances of a partitioned service each need their own id: by
        // default the machine's (a container's, a pod's) host name.
        instance = try reader.string("instance", default: partitions > 1 ? "tracker-\(service)-\(Self.hostName)" : "tracker-\(service)")
        guard DeviceID(instance) != nil else {
            throw ConfigError("instance", "use 1–64 of A-Z a-z 0-9 . _ -, got '\(instance)'")
        }
        // A partitioned instance's id is its control session's client id: it must not take the service's others.
        if partitions > 1, instance == "tracker-\(service)" || (instance.hasPrefix("tracker-\(service)-p") && Int(instance.dropFirst("tracker-\(service)-p".count)) != nil) {
            throw ConfigError("instance", "'\(instance)' is a session of the partitioned service (its ingress, or a partition's): "
                              + "give each instance an id of its own (default tracker-\(service)-{host name})")
        }
        healthIntervalSec = try reader.double("healthIntervalSec", default: 5, in: 0.1...3_600)
        let level = try reader.choice("logLevel", default: "info", among: LogLevel.allCases.map(\.rawValue))
        logLevel = LogLevel(rawValue: level) ?? .info
        deviceCacheCapacity = try reader.int("deviceCacheCapacity", default: 10_000, in: 1...10_000_000)
        cacheBudgetMB = try reader.int("cacheBudgetMB", default: 8, in: 1...65_536)
        queryBacklog = try reader.int("queryBacklog", default: 64, in: 1...100_000)
        maxReplyBytes = try reader.int("maxReplyBytes", default: 1 << 20, in: 4_096...(64 << 20))
        outputBacklogMax = try reader.int("outputBacklogMax", default: 2_000, in: 100...1_000_000)
        sqliteCacheMB = try reader.int("sqliteCacheMB", default: Database.defaultCacheKB / 1_000, in: 1...4_096)
        let repairTimeout = try reader.double("repairTimeoutSec", default: 30, in: 1...3_600)
        let repairRetry = try reader.double("repairRetrySec", default: 3, in: 0.1...600)
        guard repairRetry <= repairTimeout else {
            throw ConfigError("repairRetrySec", "must not exceed repairTimeoutSec (\(repairTimeout)), got \(repairRetry)")
        }
        repair = RepairSettings(retryMs: Int64(repairRetry * 1000), timeoutMs: Int64(repairTimeout * 1000))
        leaseSec = try reader.double("leaseSec", default: 10, in: 2...600)
        let prefix = topicPrefix
        replyTopicPrefixes = try reader.optionalString("replyTopicPrefixes").map { list in
            try list.split(separator: ",").map { $0.trimmingSpaces() }.filter { !$0.isEmpty }.map { allowed in
                guard !allowed.contains(where: { "+#".contains($0) }), !allowed.hasPrefix("$"), !allowed.hasPrefix("/"),
                      allowed.split(separator: "/").first.map(String.init) != prefix else {
                    throw ConfigError("replyTopicPrefixes", "each must be a topic prefix without + # or a leading $ or /, outside '\(prefix)/', got '\(allowed.prefix(120))'")
                }
                return allowed
            }
        } ?? []
    }
}
