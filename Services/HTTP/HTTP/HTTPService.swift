import Bus
import Foundation
import HTTPCore
import Model
import Runtime
import Synchronization
import TrackerLog

/// tracker-http's own settings (`config/http.json`, `TRACKER_HTTP_PORT`, …).
struct HTTPSettings {
    var httpHost: String
    var httpPort: Int
    var gatePort: Int
    var operatorPort: Int
    var limits: MHDServer.Limits
    var sessionIdleSec: Double
    var maxSessions: Int
    var loginFailuresPerMinute: Int
    var commandTimeoutSec: Double

    init(_ reader: SettingsReader) throws {
        httpHost = try reader.string("httpHost", default: "0.0.0.0")
        httpPort = try reader.int("httpPort", default: 5055, in: 1...65_535)
        gatePort = try reader.int("gatePort", default: 1887, in: 1...65_535)
        operatorPort = try reader.int("operatorPort", default: 1885, in: 1...65_535)
        limits = MHDServer.Limits(
            maxBodyBytes: try reader.int("maxBodyBytes", default: 65_536, in: 1_024...16 << 20),
            connections: UInt32(try reader.int("maxConnections", default: 512, in: 1...100_000)),
            connectionsPerAddress: UInt32(try reader.int("maxConnectionsPerAddress", default: 64, in: 1...100_000)),
            idleTimeoutSec: UInt32(try reader.int("requestTimeoutSec", default: 10, in: 1...3_600)))
        sessionIdleSec = try reader.double("sessionIdleSec", default: 60, in: 1...86_400)
        maxSessions = try reader.int("maxSessions", default: 256, in: 1...100_000)
        loginFailuresPerMinute = try reader.int("loginFailuresPerMinute", default: 5, in: 1...10_000)
        commandTimeoutSec = try reader.double("commandTimeoutSec", default: 10, in: 0.1...300)
    }
}

/// The process: its own connection (health, and the services' health it
/// reports), the HTTP daemon, and the accounts' sessions with their sweeper,
/// on the same lifecycle as every service.
enum HTTPService {
    static func run(arguments: [String] = CommandLine.arguments,
                    environment: [String: String] = ProcessInfo.processInfo.environment) async -> Int32 {
        let counters = HealthCounters()
        let logger: Logger
        let own: MQTTClient
        let health: HealthReporter
        let server: MHDServer
        let sessions: AccountSessions
        let statuses = ServiceStatuses()
        let settings: CommonSettings
        let http: HTTPSettings
        do {
            let reader = try SettingsReader.load(service: "http", arguments: arguments, environment: environment)
            settings = try CommonSettings(service: "http", reader)
            http = try HTTPSettings(reader)
            try reader.rejectUnknownKeys()
            logger = Logger(label: settings.instance, minimum: settings.logLevel)
            let topics = Topics(prefix: settings.topicPrefix, ownTracksPrefix: settings.ownTracksTopic)
            health = HealthReporter(service: "http", instance: settings.instance, topics: topics,
                                    interval: .milliseconds(Int64(settings.healthIntervalSec * 1000)), counters: counters)
            own = try MQTTClient(MQTTOptions(host: settings.mqttHost, port: Int32(settings.mqttPort), clientID: settings.instance,
                                             cleanStart: true, username: settings.mqttUsername, password: settings.mqttPassword,
                                             will: health.will, logger: logger))
            let clock = SystemWallClock()
            sessions = AccountSessions(gate: BrokerGate(host: settings.mqttHost, gatePort: Int32(http.gatePort), operatorPort: Int32(http.operatorPort)),
                                       topics: topics, max: http.maxSessions, idleMs: Int64(http.sessionIdleSec * 1000), clock: clock, logger: logger)
            let api = API(sessions: sessions, throttle: Throttle(LoginThrottle(limit: http.loginFailuresPerMinute)), counters: counters,
                          topics: topics, clock: clock, commandTimeout: .milliseconds(Int64(http.commandTimeoutSec * 1000)), services: statuses)
            server = MHDServer(host: http.httpHost, port: UInt16(http.httpPort), limits: http.limits, logger: logger,
                               blocking: { api.handleBlocking($0) }) { await api.handle($0) }
            _ = try server.start()
        } catch {
            FileHandle.standardError.write(Data("tracker-http: \(error)\n".utf8))
            return 2
        }
        own.setHandler { statuses.received($0) }
        let ownPart = ConnectionPart(own, subscribing: ["\(settings.topicPrefix)/_health/+"], farewell: { health.message(.offline) }, logger: logger) {
            logger.info("service started", ["service": "http", "http": "\(http.httpHost):\(http.httpPort)",
                                            "broker": "\(settings.mqttHost):\(settings.mqttPort)", "version": TrackerVersion.current])
        }
        let lifecycle = Lifecycle([
            Lifecycle.Part("connection", ownPart),
            Lifecycle.Part("sessions", SessionSweeper(sessions, counters: counters)),
            Lifecycle.Part("http", server),
            Lifecycle.Part("health", HealthPart(health, on: own, logger: logger, ready: { own.isSubscribed })),
        ], logger: logger)
        switch await lifecycle.run() {
        case .signal: logger.info("stopped"); return 0
        case .partEnded(let part, let error):
            logger.error("stopped: a part ended by itself", ["part": part, "error": error ?? "none"])
            return 1
        }
    }
}

/// Closes the accounts' idle sessions now and then; all of them at the end.
final class SessionSweeper: LongRunning {
    let sessions: AccountSessions
    let counters: HealthCounters
    private let stopping = StopRequest()
    init(_ sessions: AccountSessions, counters: HealthCounters) { self.sessions = sessions; self.counters = counters }

    func run() async {
        while !stopping.isRequested {
            await sessions.closeIdle()
            counters.set("sessions", Int64(await sessions.count))
            await stopping.wait(atMost: .seconds(5))
        }
        await sessions.closeAll()
    }

    func stop() { stopping.request() }
}
