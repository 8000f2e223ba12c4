import Bus
import Foundation
import Model
#if canImport(Glibc)
import Glibc
#endif

/// Runs one of the built service executables against a test broker, with
/// its own data directory, as a real process (so tests can kill -9 it).
public final class ServiceHarness: @unchecked Sendable {
    public let executable: String
    public let dataDir: URL
    public let port: Int32
    public let extraEnvironment: [String: String]
    public let configFile: URL
    public private(set) var process: ChildProcess?
    private var runs = 0

    /// Where the service executables are: `TRACKER_BIN_DIR` when set (to run
    /// the same tests or benchmarks against another build), else the
    /// directory of the running test or benchmark binary, where SwiftPM puts them.
    public static var binaryDirectory: URL {
        if let override = ProcessInfo.processInfo.environment["TRACKER_BIN_DIR"] { return URL(fileURLWithPath: override) }
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var url = URL(fileURLWithPath: exe).deletingLastPathComponent()
        // An .xctest bundle on macOS nests the binary; on Linux it sits beside the executables.
        while url.path.contains(".xctest") { url.deleteLastPathComponent() }
        return url
    }

    public init(executable: String, broker: TestBroker, config: [String: Any]? = nil, environment: [String: String] = [:],
                binaryDirectory: URL = ServiceHarness.binaryDirectory) throws {
        self.executable = binaryDirectory.appendingPathComponent(executable).path
        guard FileManager.default.isExecutableFile(atPath: self.executable) else {
            throw TestSupportError("\(self.executable) is not built; run `swift build` first")
        }
        self.port = broker.port
        self.dataDir = broker.directory.appendingPathComponent("\(executable)-\(UUID().uuidString.prefix(6))")
        try FileManager.default.createDirectory(at: dataDir, withIntermediateDirectories: true)
        // Always an explicit config, so the repository's config/ never leaks into a test.
        configFile = dataDir.appendingPathComponent("config.json")
        try JSONSerialization.data(withJSONObject: config ?? [:]).write(to: configFile)
        extraEnvironment = environment
    }

    public var environment: [String: String] {
        var env = ProcessInfo.processInfo.environment
        env["TRACKER_MQTT_HOST"] = "127.0.0.1"
        env["TRACKER_MQTT_PORT"] = "\(port)"
        env["TRACKER_DATA_DIR"] = dataDir.path
        for (k, v) in extraEnvironment { env[k] = v }
        return env
    }

    /// Starts the process (again, after a stop or kill).
    public func start() throws {
        runs += 1
        process = try ChildProcess(executable: executable, arguments: ["--config", configFile.path],
                                   environment: environment, logFile: dataDir.appendingPathComponent("run-\(runs).log").path)
    }

    /// SIGKILL, no goodbye.
    public func kill9() {
        process?.kill(SIGKILL)
        _ = process?.wait(timeout: 5)
    }

    /// SIGTERM; returns the exit code. A service's own shutdown budget is
    /// up to ~24 s when the broker is slow to acknowledge (input 3 + 5 s,
    /// output drain 5 s, offline health 3 s, output 3 + 5 s): wait that long.
    @discardableResult
    public func stop() -> Int32? {
        process?.kill(SIGTERM)
        return process?.wait(timeout: 30)
    }

    public var log: String { process?.log ?? "" }

    deinit {
        process?.kill(SIGKILL)
        _ = process?.wait(timeout: 2)
    }
}

extension ServiceHarness {
    /// What every test service runs with unless it says otherwise: health
    /// every 0.2 s, so that waits for it end quickly.
    public static var fastHealth: [String: Any] { ["healthIntervalSec": 0.2] }

    /// `tracker-<service>` on `broker`, started, with `config` merged over `fastHealth`.
    public static func started(_ service: String, on broker: TestBroker, config: [String: Any] = [:]) throws -> ServiceHarness {
        let harness = try ServiceHarness(executable: "tracker-\(service)", broker: broker,
                                         config: fastHealth.merging(config) { _, given in given })
        try harness.start()
        return harness
    }
}
