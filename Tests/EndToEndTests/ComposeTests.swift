import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import TestSupport
import Testing

/// The compose deployment's own pieces, run natively (no Docker engine
/// here): the accounts script, the broker config as mosquitto reads it, a
/// service logging in with its password file, and the health check the
/// containers run. `docker-compose config -q` checks the YAML in scripts/test.
@Suite(.serialized) struct ComposeTests {
    @Test func theComposeBrokerAccountsAndHealthCheckWork() async throws {
        let root = Repository.root
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tracker-compose-\(UUID().uuidString.prefix(8))")
        let accounts = dir.appendingPathComponent("accounts")
        try FileManager.default.createDirectory(at: accounts, withIntermediateDirectories: true)
        // The accounts service's script, twice: the second run keeps every password.
        func makeAccounts() throws {
            let script = try ChildProcess(executable: "/bin/sh", arguments: [root.appendingPathComponent("compose/accounts.sh").path],
                                          environment: ["ACCOUNTS_DIR": accounts.path, "PATH": "/usr/bin:/bin:/usr/sbin"],
                                          logFile: dir.appendingPathComponent("accounts.log").path)
            #expect(script.wait(timeout: 30) == 0, "\(script.log)")
        }
        try makeAccounts()
        let secret = try String(contentsOf: accounts.appendingPathComponent("tracker-gateway"), encoding: .utf8)
        try makeAccounts()
        #expect(try String(contentsOf: accounts.appendingPathComponent("tracker-gateway"), encoding: .utf8) == secret)
        let users = try String(contentsOf: accounts.appendingPathComponent("passwords"), encoding: .utf8)
            .split(separator: "\n").map { String($0.prefix { $0 != ":" }) }
        #expect(Set(users) == Set(Constellation.services.flatMap { ["tracker-\($0)", "tracker-\($0)-out"] } + ["trackerctl", "tracker-map", "tracker-http"]))
        // The services log in on the operators' listener (it keeps the client ids a partitioned service names).
        let operators = try String(contentsOf: accounts.appendingPathComponent("operators"), encoding: .utf8)
            .split(separator: "\n").map { String($0.prefix { $0 != ":" }) }
        #expect(Set(operators) == Set(Constellation.services.flatMap { ["tracker-\($0)", "tracker-\($0)-out"] } + ["trackerctl", "tracker-http"]))

        // compose/mosquitto.conf as the broker container reads it, on free ports and local paths.
        let (port, operatorPort, webPort, gatePort) = (try freeListenerPort(), try freeListenerPort(), try freeListenerPort(), try freeListenerPort())
        // What the broker image's build does: the page and its libraries, beside the broker.
        let web = dir.appendingPathComponent("web")
        let build = try ChildProcess(executable: root.appendingPathComponent("scripts/build-web").path, arguments: [web.path],
                                     logFile: dir.appendingPathComponent("build-web.log").path)
        #expect(build.wait(timeout: 120) == 0, "\(build.log)")
        let config = try String(contentsOf: root.appendingPathComponent("compose/mosquitto.conf"), encoding: .utf8)
            .replacingOccurrences(of: "listener 1883 0.0.0.0", with: "listener \(port) 127.0.0.1")
            .replacingOccurrences(of: "listener 1885 0.0.0.0", with: "listener \(operatorPort) 127.0.0.1")
            .replacingOccurrences(of: "listener 9001 0.0.0.0", with: "listener \(webPort) 127.0.0.1")
            .replacingOccurrences(of: "listener 1887 0.0.0.0", with: "listener \(gatePort) 127.0.0.1")
            .replacingOccurrences(of: "/mosquitto/web", with: web.path)
            .replacingOccurrences(of: "/mosquitto/accounts/", with: accounts.path + "/")
            .replacingOccurrences(of: "/mosquitto/config/acl", with: root.appendingPathComponent("config/acl").path)
            .replacingOccurrences(of: "/mosquitto/data/", with: dir.path + "/")
            .replacingOccurrences(of: "log_dest stdout", with: "log_dest stderr\nuser \(NSUserName())")
        try config.write(to: dir.appendingPathComponent("mosquitto.conf"), atomically: true, encoding: .utf8)
        let broker = try ChildProcess(executable: "/usr/sbin/mosquitto", arguments: ["-c", dir.appendingPathComponent("mosquitto.conf").path],
                                      logFile: dir.appendingPathComponent("mosquitto.log").path)
        defer { broker.kill(SIGTERM); _ = broker.wait(timeout: 5) }
        #expect(waitForPort(port, timeout: 10) && waitForPort(operatorPort, timeout: 10) && waitForPort(webPort, timeout: 10), "\(broker.log)")
        // The broker serves the map page and its bundled MQTT client.
        for (path, marker) in [("index.html", "<title>Tracker"), ("vendor/mqtt.js", "mqttlib"), ("vendor/leaflet/leaflet.js", "Leaflet")] {
            let (data, response) = try await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(webPort)/\(path)")!)
            #expect((response as? HTTPURLResponse)?.statusCode == 200 && String(decoding: data, as: UTF8.self).contains(marker), "\(path)")
        }

        // The gateway as its container runs it: its account, the password from the file, on the operators' listener.
        let gatewayData = dir.appendingPathComponent("gateway")
        try FileManager.default.createDirectory(at: gatewayData, withIntermediateDirectories: true)
        var environment = ProcessInfo.processInfo.environment
        environment.merge(["TRACKER_MQTT_PORT": "\(operatorPort)", "TRACKER_MQTT_USERNAME": "tracker-gateway",
                           "TRACKER_MQTT_PASSWORD_FILE": accounts.appendingPathComponent("tracker-gateway").path,
                           "TRACKER_DATA_DIR": gatewayData.path]) { $1 }
        try #"{"healthIntervalSec": 0.5}"#.write(to: gatewayData.appendingPathComponent("config.json"), atomically: true, encoding: .utf8)
        let gateway = try ChildProcess(executable: ServiceHarness.binaryDirectory.appendingPathComponent("tracker-gateway").path,
                                       arguments: ["--config", gatewayData.appendingPathComponent("config.json").path],
                                       environment: environment, logFile: gatewayData.appendingPathComponent("run.log").path)
        defer { gateway.kill(SIGTERM); _ = gateway.wait(timeout: 30) }

        // The container's health check: trackerctl on the operators' listener, with the same account.
        func healthCheck(_ service: String) throws -> Int32? {
            var env = environment
            env["TRACKER_MQTT_PORT"] = "\(operatorPort)"
            let check = try ChildProcess(executable: ServiceHarness.binaryDirectory.appendingPathComponent("trackerctl").path,
                                         arguments: ["health", "--wait", "0.5", "--check", service], environment: env,
                                         logFile: dir.appendingPathComponent("check-\(service)-\(UUID().uuidString.prefix(4)).log").path)
            return check.wait(timeout: 20)
        }
        // Online within its start period (a check a second, as compose's retries would).
        var status: Int32? = 1
        for _ in 0..<20 where status != 0 { status = try healthCheck("gateway") }
        #expect(status == 0, "gateway log: \(gateway.log)\nbroker log: \(broker.log)")
        // A service that never ran fails its check.
        #expect(try healthCheck("filter") == 1)
        // Killed, its will says offline: the check fails.
        gateway.kill(SIGKILL)
        _ = gateway.wait(timeout: 5)
        var afterKill: Int32? = 0
        for _ in 0..<20 where afterKill == 0 { afterKill = try healthCheck("gateway") }
        #expect(afterKill == 1)
    }
}
