import Bus
import Foundation
import Model

/// A Tracker service as the runner drives it. Messages arrive on the bus's
/// network thread, one at a time; `handle` must commit what it applies
/// before returning (see `MQTTClient`), which is what makes kill -9 safe.
public protocol TrackerService: AnyObject, Sendable {
    /// Filters subscribed at QoS 1 on the service's persistent session.
    var subscriptions: [String] { get }
    func handle(_ message: MQTTMessage)
    /// After each (re)connect, before that connection's first message.
    func connected(reconnect: Bool)
    /// Commits what the messages handled so far changed. Called on the network
    /// thread before their acknowledgements are written, so a batch of
    /// messages costs one commit and none is acknowledged unstored.
    func flush()
    /// Periodic work (idle timeouts, retention), every `tickInterval`.
    func tick()
    /// Graceful stop: persist what is in memory and close the store.
    func close()
}

extension TrackerService {
    public func connected(reconnect: Bool) {}
    public func flush() {}
    public func tick() {}
}

/// What a service gets from the runner.
public struct ServiceContext: Sendable {
    public let name: String
    public let settings: CommonSettings
    public let topics: Topics
    public let logger: Logger
    public let counters: HealthCounters
    public let client: MQTTClient
    public let responder: CommandResponder
    public let clock: any WallClock

    public init(name: String, settings: CommonSettings, logger: Logger, counters: HealthCounters,
                client: MQTTClient, clock: any WallClock = SystemWallClock()) {
        self.name = name
        self.settings = settings
        self.topics = Topics(prefix: settings.topicPrefix)
        self.logger = logger
        self.counters = counters
        self.client = client
        self.responder = CommandResponder(topics: topics, client: client)
        self.clock = clock
    }

    /// `{dataDir}/{instance}.sqlite`, creating the directory.
    public func databasePath() throws -> String {
        do {
            try FileManager.default.createDirectory(atPath: settings.dataDir, withIntermediateDirectories: true)
        } catch {
            throw ConfigError("dataDir", "cannot create \(settings.dataDir): \(error.localizedDescription)")
        }
        return "\(settings.dataDir)/\(settings.instance).sqlite"
    }

    /// Publishes an event at QoS 1 on `tracker/{device}/events`.
    public func publish(_ event: Event) {
        let message = MQTTMessage(topic: topics.events(event.device), payload: Array(JSONCoding.encode(event)))
        do { try client.publish(message) } catch {
            logger.warning("event not published", ["device": event.device.rawValue, "type": event.type, "error": "\(error)"])
        }
    }
}

/// Runs one service process: settings, bus with will, health, signals.
public enum ServiceRunner {
    /// Never returns: exits 0 after a graceful stop, 2 on a bad setting.
    public static func main(
        name: String,
        tickInterval: Duration = .seconds(1),
        make: (ServiceContext, SettingsReader) throws -> any TrackerService
    ) async -> Never {
        let arguments = CommandLine.arguments
        let environment = ProcessInfo.processInfo.environment
        let logger: Logger
        let service: any TrackerService
        let context: ServiceContext
        let health: HealthReporter
        do {
            let reader = try SettingsReader.load(service: name, arguments: arguments, environment: environment)
            let settings = try CommonSettings(service: name, reader)
            logger = Logger(label: settings.instance, minimum: settings.logLevel)
            let counters = HealthCounters()
            health = HealthReporter(service: name, instance: settings.instance,
                                    topics: Topics(prefix: settings.topicPrefix),
                                    interval: .milliseconds(Int64(settings.healthIntervalSec * 1000)), counters: counters)
            let client = try MQTTClient(MQTTOptions(
                host: settings.mqttHost, port: Int32(settings.mqttPort), clientID: settings.instance,
                cleanStart: false, sessionExpirySec: 7 * 24 * 3600, username: settings.mqttUsername,
                password: settings.mqttPassword, will: health.will))
            context = ServiceContext(name: name, settings: settings, logger: logger, counters: counters, client: client)
            service = try make(context, reader)
            try reader.rejectUnknownKeys()
        } catch {
            FileHandle.standardError.write(Data("tracker-\(name): \(error)\n".utf8))
            exit(2)
        }

        let client = context.client
        client.setHandler { [service] in service.handle($0) }
        client.setBeforeAcknowledging { [service] in service.flush() }
        client.setOnConnect { [service, logger] reconnect in
            if reconnect { logger.info("reconnected to broker") }
            service.connected(reconnect: reconnect)
        }

        let signal = Task { await Signals.waitForTermination() }
        let connected = Task {
            var attempt = 0
            while !Task.isCancelled {
                do {
                    try await client.connect()
                    try await client.subscribe(service.subscriptions, qos: .atLeastOnce)
                    return true
                } catch {
                    attempt += 1
                    if attempt == 1 || attempt % 10 == 0 {
                        logger.warning("broker not reachable, retrying", ["error": "\(error)", "attempt": "\(attempt)"])
                    }
                    try? await Task.sleep(for: .milliseconds(min(2_000, 200 * attempt)))
                }
            }
            return false
        }
        let stopEarly = Task { _ = await signal.value; connected.cancel() }
        guard await connected.value else {
            logger.info("stopped before connecting")
            exit(0)
        }
        stopEarly.cancel()
        logger.info("service started", ["service": name, "broker": "\(context.settings.mqttHost):\(context.settings.mqttPort)",
                                        "version": TrackerVersion.current])

        let healthLoop = Task { await health.run(client: client) }
        let ticker = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: tickInterval)
                if !Task.isCancelled { service.tick() }
            }
        }

        let received = await signal.value
        logger.info("stopping", ["signal": "\(received)"])
        healthLoop.cancel()
        ticker.cancel()
        await client.drain(timeout: .seconds(5))
        try? await client.publishAndWait(health.message(.offline), timeout: .seconds(3))
        await client.disconnect(timeout: .seconds(3))
        service.close()
        logger.info("stopped")
        exit(0)
    }
}
