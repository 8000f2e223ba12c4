import Bus
import FoundationEssentials
import Glibc
import TrackerLog
import Model
import Store
import Synchronization

/// What a service's definition is made from: its settings and the process's
/// logger and clock.
public struct ServiceContext: Sendable {
    public let name: String
    public let settings: CommonSettings
    public let topics: Topics
    public let logger: Logger
    public let clock: any WallClock

    public init(name: String, settings: CommonSettings, logger: Logger, clock: any WallClock = SystemWallClock()) {
        self.name = name
        self.settings = settings
        self.topics = Topics(prefix: settings.topicPrefix, ownTracksPrefix: settings.ownTracksTopic)
        self.logger = logger
        self.clock = clock
    }

    /// `{dataDir}/{instance}.sqlite`, creating the directory.
    public func databasePath() throws -> String {
        do {
            // 0700: the stores are the service's alone.
            try FileManager.default.createDirectory(atPath: settings.dataDir, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
        } catch {
            throw ConfigError("dataDir", "cannot create \(settings.dataDir): \(ErrorText.describe(error))")
        }
        // One an earlier version made 0755 is tightened too, if it is ours.
        guard Database.makePrivate(settings.dataDir) else {
            throw ConfigError("dataDir", "cannot make \(settings.dataDir) private (0700): \(String(cString: strerror(errno)))")
        }
        return "\(settings.dataDir)/\(settings.instance).sqlite"
    }
}

/// Runs one service process: settings, store, bus with its will, health,
/// signals. Every message, commit and tick happens on the input connection's
/// network thread (see `ServiceHost`); this only starts and stops things,
/// all through one `Lifecycle`.
public enum ServiceRunner {
    /// Runs until SIGTERM or SIGINT and returns the exit code: 0 after a
    /// graceful stop, 2 for a bad setting or a store that cannot be opened,
    /// 1 when a part of the service ended by itself.
    public static func run<Row>(
        name: String,
        arguments: [String] = CommandLine.arguments,
        environment: [String: String] = ProcessInfo.processInfo.environment,
        tickInterval: Duration = .seconds(1),
        define: (ServiceContext, SettingsReader) throws -> ServiceDefinition<Row>
    ) async -> Int32 {
        Heap.limitArenas(environment: environment)
        if arguments.dropFirst().first == "repartition" {
            return repartition(name: name, arguments: arguments, environment: environment, define: define)
        }
        let context: ServiceContext
        let client: MQTTClient
        let output: MQTTClient
        let pressure: OutputPressure
        let host: ServiceHost<Row>
        let storeLock: StoreLock
        let counters = HealthCounters()
        let health: HealthReporter
        do {
            let definition: ServiceDefinition<Row>
            (context, definition) = try configured(name: name, arguments: arguments, environment: environment, define: define)
            let settings = context.settings
            health = HealthReporter(service: name, instance: settings.instance, topics: context.topics,
                                    interval: .milliseconds(Int64(settings.healthIntervalSec * 1000)), counters: counters)
            // With logins the broker names each connection after its account
            // (use_username_as_clientid, so no one can take over a service's
            // session by its client id): the output connection has its own,
            // "<account>-out", with the same password. A partitioned service
            // names its sessions itself, on a listener that keeps client ids
            // (docs/scaling.md): every connection logs in as its account.
            output = try MQTTClient(MQTTOptions(
                host: settings.mqttHost, port: Int32(settings.mqttPort), clientID: "\(settings.instance)-out",
                cleanStart: true, username: settings.mqttUsername.map { settings.partitions > 1 ? $0 : "\($0)-out" },
                password: settings.mqttPassword, logger: context.logger))
            pressure = OutputPressure(limit: settings.outputBacklogMax, counters: counters)
            if Repartition<Row>.interrupted(in: settings.dataDir, service: name) {
                throw ConfigError("dataDir", "a repartition of \(settings.dataDir) was stopped halfway: run "
                                  + "`tracker-\(name) repartition --to Q` again to finish it before starting")
            }
            if settings.partitions > 1 {
                let partitioned = try PartitionedService(context: context, definition: definition, counters: counters,
                                                         output: output, pressure: pressure, tickInterval: tickInterval)
                return await partitioned.run()
            }
            // Two connections: input (the persistent session, its subscriptions and
            // the will) and output (everything the service publishes), so input
            // can wait at the broker while output drains, and memory stays bounded.
            client = try MQTTClient(MQTTOptions(
                host: settings.mqttHost, port: Int32(settings.mqttPort), clientID: settings.instance,
                cleanStart: false, sessionExpirySec: 7 * 24 * 3600, username: settings.mqttUsername,
                password: settings.mqttPassword, will: health.will, logger: context.logger))
            // One process a store: a second one with the same id and data directory, or a repartition, waits for this one.
            let path = try context.databasePath()
            guard let held = try StoreLock(path: path + ".lock") else {
                throw ConfigError("instance", "\(path) is in use by another process of \(name) (the same instance id and data directory)")
            }
            storeLock = held
            host = try ServiceHost(definition, databasePath: path, bus: output, topics: context.topics,
                                   logger: context.logger, counters: counters, clock: context.clock,
                                   cacheCapacity: settings.deviceCacheCapacity, cacheBudgetBytes: settings.cacheBudgetMB << 20, queryBacklog: settings.queryBacklog,
                                   maxReplyBytes: settings.maxReplyBytes, sqliteCacheKB: settings.sqliteCacheMB * 1_000,
                                   instance: settings.instance, repair: settings.repair,
                                   replyTopicPrefixes: settings.replyTopicPrefixes,
                                   pause: { [client] in client.holdReading(for: $0) })
        } catch {
            StandardError.write("tracker-\(name): \(error)\n")
            return 2
        }
        let logger = context.logger

        // A message the broker refuses is final: counted, said once a minute per topic, never resent.
        let refusals = RefusalLog(logger: logger, counters: counters, clock: context.clock)
        output.setOnRefused { refusals.note(topic: $0, code: $1) }
        client.setOnRefused { refusals.note(topic: $0, code: $1) }
        let heapTrims = HeapTrims(counters: counters, clock: context.clock)
        drive(host, from: client, output: output, pressure: pressure, tickInterval: tickInterval) {
            host.tick()
            heapTrims.trimIfDue()
        }

        // Started together; stopped from the last to the first, each once the
        // one after it has returned: health, then input (no new work: its
        // network thread ends, so nothing is still being handled), then the
        // host's parts (queued queries answered, the service's worker), then
        // output (what was published reaches the broker, then offline).
        // The host closes last, once all of them have ended.
        let outputPart = ConnectionPart(output, farewell: { health.message(.offline) }, logger: logger)
        let inputPart = ConnectionPart(client, subscribing: host.subscriptions, after: output, drainTimeout: .seconds(1), logger: logger) {
            logger.info("service started", ["service": name, "broker": "\(context.settings.mqttHost):\(context.settings.mqttPort)",
                                            "version": TrackerVersion.current, "epoch": host.epoch])
        }
        // Online means "takes messages": the input connection is up and subscribed.
        let healthPart = HealthPart(health, on: output, logger: logger, ready: { client.isSubscribed })
        let lifecycle = Lifecycle([Lifecycle.Part("output", outputPart)] + host.parts
                                  + [Lifecycle.Part("input", inputPart), Lifecycle.Part("health", healthPart)], logger: logger)
        let ending = await lifecycle.run()
        host.close()
        storeLock.release()
        return exitCode(after: ending, logger: logger)
    }

    /// The service's settings (its config file, then the environment), its
    /// context and its definition; a key nobody read is refused.
    static func configured<Row>(name: String, arguments: [String], environment: [String: String],
                                define: (ServiceContext, SettingsReader) throws -> ServiceDefinition<Row>) throws
        -> (ServiceContext, ServiceDefinition<Row>) {
        let reader = try SettingsReader.load(service: name, arguments: arguments, environment: environment)
        let settings = try CommonSettings(service: name, reader)
        let context = ServiceContext(name: name, settings: settings, logger: Logger(label: settings.instance, minimum: settings.logLevel))
        let definition = try define(context, reader)
        try reader.rejectUnknownKeys()
        return (context, definition)
    }

    /// `tracker-{service} repartition --to Q [--config FILE]`: the stopped
    /// service's stores in its `dataDir`, moved to Q partitions (see
    /// `Repartition`). 0 when done, 1 when refused (nothing changed), 2 for bad settings.
    static func repartition<Row>(name: String, arguments: [String], environment: [String: String],
                                 define: (ServiceContext, SettingsReader) throws -> ServiceDefinition<Row>) -> Int32 {
        func fail(_ text: String, code: Int32) -> Int32 {
            StandardError.write("tracker-\(name) repartition: \(text)\n")
            return code
        }
        var rest = Array(arguments.dropFirst(2))
        guard let index = rest.firstIndex(of: "--to"), index + 1 < rest.count, let target = Int(rest[index + 1]), (1...1_024).contains(target) else {
            return fail("usage: tracker-\(name) repartition --to Q (1…1024) [--config FILE]; every instance stopped first", code: 2)
        }
        rest.removeSubrange(index...(index + 1))
        do {
            let (context, definition) = try configured(name: name, arguments: [arguments[0]] + rest, environment: environment, define: define)
            let report = try Repartition(definition: definition, directory: context.settings.dataDir, target: target,
                                         nowMs: context.clock.nowMs(), logger: context.logger).run()
            print("tracker-\(name): \(report); start every instance with partitions \(target)")
            return 0
        } catch let failure as Repartition<Row>.Failure {
            return fail(failure.description, code: 1)
        } catch let error as ConfigError {
            return fail("\(error)", code: 2)
        } catch {
            return fail("\(error)", code: 1)
        }
    }

    /// 0 after a signal, 1 when a part ended by itself; said in the log.
    static func exitCode(after ending: Lifecycle.Ending, logger: Logger) -> Int32 {
        switch ending {
        case .signal:
            logger.info("stopped")
            return 0
        case .partEnded(let part, let error):
            logger.error("stopped: a part ended by itself", ["part": part, "error": error ?? "none"])
            return 1
        }
    }
}

extension ServiceRunner {
    /// Hands `client`'s messages, commits and connects to `host`, confined
    /// to its network thread; reading waits while `output` is too far behind.
    static func drive<Row>(_ host: ServiceHost<Row>, from client: MQTTClient, output: MQTTClient, pressure: OutputPressure,
                           tickInterval: Duration, tick: @escaping @Sendable () -> Void) {
        client.setHandler { host.receive($0) }
        client.setBeforeAcknowledging { host.commit() }
        client.setPeriodic(every: tickInterval, tick)
        client.setFollowUp(every: ServiceHost<Row>.sweepSliceInterval) { host.continueSweep() }
        client.setOnConnect { host.connected(reconnect: $0) }
        client.setReadGate { [output, pressure] in pressure.allowsReading(waiting: output.inFlight) }
        host.confine(to: client)
    }
}

/// Messages the broker refused: health's `denied`, and one log line per
/// topic a minute at most (a flood of refusals must not flood the log).
final class RefusalLog: Sendable {
    private let logger: Logger
    private let counters: HealthCounters
    private let clock: any WallClock
    /// When each topic's refusal was last logged (wall clock, ms).
    private let lastLogged = Mutex<[String: Int64]>([:])

    init(logger: Logger, counters: HealthCounters, clock: any WallClock) {
        self.logger = logger; self.counters = counters; self.clock = clock
    }

    func note(topic: String, code: Int32) {
        counters.count("denied")
        let now = clock.nowMs()
        let log = lastLogged.withLock { seen -> Bool in
            if seen.count > 1_000 { seen.removeAll() }
            guard seen[topic].map({ now - $0 >= 60_000 }) ?? true else { return false }
            seen[topic] = now
            return true
        }
        if log { logger.warning("the broker refused a message; it is not sent again", ["mqtt.topic": String(topic.prefix(200)), "code": "\(code)"]) }
    }
}

/// Back-pressure: input is read only while the output waiting for the broker
/// stays under `limit` messages; once held back, reading resumes below half
/// of it (hysteresis, so the gate does not flutter).
final class OutputPressure: Sendable {
    let limit: Int
    private let held = Mutex(false)
    private let counters: HealthCounters

    init(limit: Int, counters: HealthCounters) { self.limit = limit; self.counters = counters }

    func allowsReading(waiting: Int) -> Bool {
        held.withLock { held in
            if held, waiting < limit / 2 { held = false }
            else if !held, waiting >= limit { held = true; counters.count("inputHeld") }
            return !held
        }
    }
}
