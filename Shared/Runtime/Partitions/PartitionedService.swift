import Bus
import FoundationEssentials
import Model
import Store
import Synchronization
import TrackerLog

/// One instance of a service whose devices are split into `partitions`
/// (see docs/scaling.md). The instance runs what the lease board gives it:
/// partitions, each a `ServiceHost` of its own with its store
/// (`tracker-{service}-p{k}.sqlite`) and its MQTT session
/// (`tracker-{service}-p{k}`), which the broker keeps, with the partition's
/// queue, while no instance runs it; and perhaps the service's ingress (the
/// session `tracker-{service}`, the unpartitioned service's), which takes what reaches the service on
/// the contract's topics and forwards it to the device's partition. One
/// session, so each device's messages keep their order.
///
/// Its own connections: *control* (the leases and the service's instances'
/// health; its will marks the instance gone) and *output* (everything its
/// partitions and it publish).
final class PartitionedService<Row>: @unchecked Sendable {
    let context: ServiceContext
    let definition: ServiceDefinition<Row>
    let counters: HealthCounters
    let output: MQTTClient
    let control: MQTTClient
    let pressure: OutputPressure
    let tickInterval: Duration
    let partitioning: Partitioning
    let health: HealthReporter
    let forwarder: Forwarder
    let logger: Logger
    private let board: Locked<PartitionBoard>
    private let runs = Locked<[Int: any OwnedRun]>([:])
    /// Each partition's stream tips as last published, and how many healths since.
    private let lastTips = Locked<[Int: (streams: [String: StreamTips], unchanged: Int)]>([:])
    /// Set when another process took this instance's control session: the instance ends.
    private let displaced = StopRequest()
    /// The partitions each other instance ran by its last health (whether it is live is the board's to say).
    private let runElsewhere = Locked<[String: Set<Int>]>([:])
    /// Partitions of a larger count, named by leases retained from before a
    /// repartition, and those being drained now.
    private let removed = Locked<Set<Int>>([])
    private let draining = Locked<Set<Int>>([])
    /// Every partition has run, so its session, with its subscriptions,
    /// is at the broker: only then does the ingress forward (a message
    /// forwarded to a partition no session subscribed to is dropped by the broker).
    private let everyPartitionSubscribed = Locked(false)

    init(context: ServiceContext, definition: ServiceDefinition<Row>, counters: HealthCounters, output: MQTTClient,
         pressure: OutputPressure, tickInterval: Duration) throws {
        let settings = context.settings
        self.context = context; self.definition = definition; self.counters = counters
        self.output = output; self.pressure = pressure; self.tickInterval = tickInterval
        logger = context.logger
        partitioning = Partitioning(count: settings.partitions)
        // The partitions, and one more slot: the ingress. Before its first
        // claim it listens for two health intervals and a renewal's time, so it
        // knows the others even where the broker did not keep their retained
        // messages (a clustered ejabberd keeps them on one node only).
        let leaseMs = Int64(settings.leaseSec * 1000)
        let board = Locked(PartitionBoard(me: settings.instance, count: settings.partitions + 1, leaseMs: leaseMs, settleMs: 1_000,
                                         quietMs: max(Self.quietMs(settings), leaseMs / 3 + 500), nowMs: context.clock.nowMs()))
        self.board = board
        let runs = self.runs
        health = HealthReporter(service: context.name, instance: settings.instance, topics: context.topics,
                                interval: .milliseconds(Int64(settings.healthIntervalSec * 1000)), counters: counters,
                                topic: context.topics.instanceHealth(context.name, settings.instance),
                                partitionCount: settings.partitions, partitions: { board.withLock { $0.running } })
        counters.queueDepth { runs.withLock { $0.values.reduce(0) { $0 + ($1.counters?.currentQueueDepth ?? 0) } } }
        // The instance id is its control connection's client id: a second
        // process with the same id would take it over (see `displaced`).
        // A clean session: all it reads is retained, and an instance that
        // never comes back must not leave a queue behind.
        control = try MQTTClient(MQTTOptions(
            host: settings.mqttHost, port: Int32(settings.mqttPort), clientID: settings.instance,
            cleanStart: true, keepAliveSec: 10, username: settings.mqttUsername,
            password: settings.mqttPassword, will: health.will, logger: context.logger))
        // What the ingress forwards comes from the routes, known without a running host.
        do {
            forwarder = Forwarder(routes: try definition.routesAlone(), service: context.name, topics: context.topics,
                                  partitioning: partitioning, output: output, maxReplyBytes: settings.maxReplyBytes,
                                  replyPrefixes: settings.replyTopicPrefixes, clock: context.clock, counters: counters,
                                  logger: context.logger)
        } catch {
            throw ConfigError("partitions", "cannot read the service's routes: \(error)")
        }
        // Made once: each partition's store is opened in it.
        _ = try context.databasePath()
    }

    /// Two health intervals: by then each live instance has said so again.
    static func quietMs(_ settings: CommonSettings) -> Int64 { 2 * Int64(settings.healthIntervalSec * 1000) + 500 }

    var service: String { context.name }
    var topics: Topics { context.topics }

    func run() async -> Int32 {
        let refusals = RefusalLog(logger: logger, counters: counters, clock: context.clock)
        output.setOnRefused { refusals.note(topic: $0, code: $1) }
        control.setOnRefused { refusals.note(topic: $0, code: $1) }
        control.setHandler { [self] in take($0) }
        let heapTrims = HeapTrims(counters: counters, clock: context.clock)
        control.setPeriodic(every: .milliseconds(250)) { [self] in
            // Disconnected, it hears neither leases nor health: it decides nothing (see `reconnected` and `watchCutOff`).
            if control.isConnected { act(board.withLock { $0.tick(nowMs: context.clock.nowMs()) }) }
            forwarder.expireGathers()
            drainRemovedPartitions()
            heapTrims.trimIfDue()
        }
        let quietMs = Self.quietMs(context.settings)
        control.setOnConnect { [self] reconnect in
            if reconnect { board.withLock { $0.reconnected(nowMs: context.clock.nowMs(), quietMs: quietMs) } }
        }
        control.setOnTakenOver { [self] in displace(because: "another connection took over its control session") }

        let subscriptions = [topics.leases(service), topics.instanceHealth(service, "+")]
        let outputPart = ConnectionPart(output, farewell: { [health] in health.message(.offline) }, logger: logger)
        let controlPart = ConnectionPart(control, subscribing: subscriptions, after: output, drainTimeout: .seconds(1), logger: logger) {
            [self] in
            logger.info("service started", ["service": service, "instance": context.settings.instance,
                                            "partitions": "\(partitioning.count)", "version": TrackerVersion.current])
        }
        let partitionsPart = PartitionsPart(stopAll: { [self] in await stopAll() }, displaced: displaced,
                                            watch: { [self, cutOff = Locked<Int64?>(nil)] in watchCutOff(since: cutOff) })
        let healthPart = HealthPart(health, on: output, logger: logger, ready: { [control] in control.isSubscribed },
                                    alongside: { [self] in tips() })
        let lifecycle = Lifecycle([Lifecycle.Part("output", outputPart), Lifecycle.Part("partitions", partitionsPart),
                                   Lifecycle.Part("control", controlPart), Lifecycle.Part("health", healthPart)], logger: logger)
        return ServiceRunner.exitCode(after: await lifecycle.run(), logger: logger)
    }

    /// Every quarter second while the instance runs (the control connection's
    /// thread does not tick while it reconnects): cut off from the broker for
    /// half a lease, it stops what it runs (see `PartitionBoard.fence`).
    func watchCutOff(since cutOff: Locked<Int64?>) {
        let now = context.clock.nowMs()
        guard !control.isConnected else { cutOff.withLock { $0 = nil }; return }
        let since = cutOff.withLock { since in since ?? { since = now; return now }() }
        guard now - since >= Int64(context.settings.leaseSec * 1000) / 2 else { return }
        let effects = board.withLock { $0.fence() }
        if !effects.isEmpty {
            logger.warning("cut off from the broker; stopping every partition before its lease runs out",
                           ["seconds": "\((now - since) / 1000)"])
        }
        act(effects)
    }

    /// Another process runs with this instance id (or the broker renames
    /// connections after their account, so every one of this instance's
    /// takes the others'): this one, the older, stops.
    func displace(because reason: String) {
        guard !displaced.isRequested else { return }
        logger.error("\(reason): two instances run with the instance id '\(context.settings.instance)', or the broker names "
                     + "connections after their account (use_username_as_clientid) where a partitioned service needs a "
                     + "listener that keeps client ids (docs/scaling.md); this one stops")
        displaced.request()
    }

    // MARK: Control messages (control's network thread)

    func take(_ message: MQTTMessage) {
        if let slot = topics.leaseSlot(message.topic, service: service) {
            if let n = Int(slot), n >= partitioning.count {
                // A partition of a larger count (before a repartition): no slot of this one; its session is drained.
                if !message.payload.isEmpty { removed.withLock { _ = $0.insert(n) } }
            } else if let k = slot == "ingress" ? partitioning.count : Int(slot) {
                // One it cannot read counts as none: at worst a claim, which the fences stop.
                let lease = message.payload.isEmpty ? nil : try? JSONCoding.decoder.decode(Lease.self, from: Data(message.payload))
                board.withLock { $0.lease(k, lease) }
            }
        } else if let instance = topics.healthInstance(message.topic, service: service) {
            let health = try? JSONCoding.decoder.decode(Health.self, from: Data(message.payload))
            // Its own topic, from a process started later: a twin. mosquitto shows a client whose id another
            // connection took no more than a lost connection, and both would take it back in turn.
            if instance == context.settings.instance {
                if let health, health.startedMs > self.health.startedMs { displace(because: "another process publishes this instance's health") }
                return
            }
            // Live while its health keeps coming: three intervals, and at least a lease's length.
            let until = health.flatMap { h in
                h.status == .online ? h.timeMs + max(3 * (h.intervalMs ?? 5_000), Int64(context.settings.leaseSec * 1000)) : nil
            }
            board.withLock { $0.member(instance, liveUntilMs: until) }
            runElsewhere.withLock { $0[instance] = Set(health?.partitions ?? []) }
        }
    }

    /// Whether every partition's session has subscribed (it has run here
    /// or at a live instance since this one started); once true, stays so:
    /// a session outlives its instance at the broker.
    func partitionsSubscribed() -> Bool {
        if everyPartitionSubscribed.withLock({ $0 }) { return true }
        let (running, live) = board.withLock { ($0.running, $0.liveMembers(nowMs: context.clock.nowMs())) }
        var seen = Set(running)
        let elsewhere = runElsewhere.withLock { $0 }
        for instance in live { seen.formUnion(elsewhere[instance] ?? []) }
        guard Set(0..<partitioning.count).isSubset(of: seen) else { return false }
        everyPartitionSubscribed.withLock { $0 = true }
        return true
    }

    // MARK: Partitions

    /// After the partitions shrank (`repartition`), what the sessions of the
    /// removed ones still hold (what the ingress forwarded there before they
    /// stopped) is sent on to each device's partition now, once, by the
    /// instance that runs the ingress, and their leases are cleared.
    func drainRemovedPartitions() {
        guard runs.withLock({ $0[partitioning.count] != nil }), partitionsSubscribed() else { return }
        let due = draining.withLock { busy in removed.withLock { $0 }.subtracting(busy).map { k in busy.insert(k); return k } }
        for k in due { Task.detached { [self] in await drain(removedPartition: k) } }
    }

    private func drain(removedPartition k: Int) async {
        let settings = context.settings
        let name = "tracker-\(service)-p\(k)"
        defer { draining.withLock { _ = $0.remove(k) } }
        do {
            // Its own session resumed (not cleaned), and ended when this connection closes (no expiry).
            let client = try MQTTClient(MQTTOptions(
                host: settings.mqttHost, port: Int32(settings.mqttPort), clientID: name, cleanStart: false,
                username: settings.mqttUsername, password: settings.mqttPassword, logger: logger))
            // When the last message came, and how many did.
            let drained = Locked((lastMs: context.clock.nowMs(), count: 0))
            client.setHandler { [self] message in
                forwarder.forwardToOwner(message)
                drained.withLock { $0 = (context.clock.nowMs(), $0.count + 1) }
            }
            client.setBeforeAcknowledging { [forwarder] in forwarder.waitForwarded() }
            try await client.connect(timeout: .seconds(10))
            // Its queue comes at once: done when nothing came for two seconds.
            while context.clock.nowMs() - drained.withLock({ $0.lastMs }) < 2_000 { try await Task.sleep(for: .milliseconds(250)) }
            await client.disconnect(timeout: .seconds(5))
            // Its own number, not `leaseTopic`: with one partition fewer, its number is the ingress's slot.
            try output.publish(MQTTMessage(topic: topics.lease(service, "\(k)"), payload: [], retain: true))
            removed.withLock { _ = $0.remove(k) }
            logger.info("drained the session of a partition removed by a repartition",
                        ["partition": "\(k)", "messages": "\(drained.withLock { $0.count })"])
        } catch {
            logger.warning("cannot drain a removed partition's session yet; trying again", ["partition": "\(k)", "error": "\(error)"])
        }
    }

    func act(_ effects: [PartitionBoard.Effect]) {
        for effect in effects {
            switch effect {
            case .publish(let k, let lease):
                do {
                    try output.publish(MQTTMessage(topic: leaseTopic(k), payload: JSONCoding.bytes(lease), retain: true))
                } catch {
                    logger.warning("lease not published", ["partition": "\(k)", "error": "\(error)"])
                }
            case .start(let k) where k == partitioning.count:
                startIngress()
            case .start(let k):
                Task.detached { [self] in start(k) }
            case .stop(let k):
                let (lease, live) = board.withLock { ($0.leases[k], $0.liveMembers(nowMs: context.clock.nowMs())) }
                logger.info("handing over", ["slot": "\(k)", "lease": lease.map { "\($0.owner) \($0.epoch) \($0.untilMs)" } ?? "none",
                                             "instances": live.joined(separator: ",")])
                guard let run = runs.withLock({ $0[k] }) else {
                    act(board.withLock { $0.stopped(k) })
                    continue
                }
                run.stop()
            }
        }
    }

    // Every connection logs in as the service's account (with logins, on a
    // listener that keeps the client ids asked for: docs/scaling.md), and
    // names its session itself: a partition's and the ingress's are the same
    // in every instance, which is what makes the session a fence.

    /// Opens partition k's store (once the last owner has let go of it) and
    /// session, and runs its host until it is stopped or its session is taken.
    func start(_ k: Int) {
        let settings = context.settings
        let name = "tracker-\(service)-p\(k)"
        let path = "\(settings.dataDir)/\(name).sqlite"
        let run: PartitionRun<Row>
        var held: StoreLock?
        do {
            held = try StoreLock(path: path + ".lock")
            guard let lock = held else {
                logger.info("partition's store still held by its last owner; trying again", ["partition": "\(k)"])
                board.withLock { $0.started(k, ok: false, nowMs: context.clock.nowMs()) }
                return
            }
            let partitionCounters = HealthCounters(forwardingTo: counters)
            let input = try MQTTClient(MQTTOptions(
                host: settings.mqttHost, port: Int32(settings.mqttPort), clientID: name, cleanStart: false,
                sessionExpirySec: 7 * 24 * 3600, username: settings.mqttUsername,
                password: settings.mqttPassword, logger: logger))
            let host = try ServiceHost(definition, databasePath: path, bus: output, topics: topics.partitioned(partitioning),
                                       logger: logger, counters: partitionCounters, clock: context.clock,
                                       cacheCapacity: max(1, settings.deviceCacheCapacity / partitioning.count),
                                       cacheBudgetBytes: max(1 << 20, (settings.cacheBudgetMB << 20) / partitioning.count),
                                       queryBacklog: settings.queryBacklog, maxReplyBytes: settings.maxReplyBytes,
                                       sqliteCacheKB: max(500, settings.sqliteCacheMB * 1_000 / partitioning.count),
                                       instance: name, repair: settings.repair, replyTopicPrefixes: settings.replyTopicPrefixes,
                                       partition: k, pause: { [input] in input.holdReading(for: $0) })
            run = PartitionRun(k: k, host: host, input: input, counters: partitionCounters, lock: lock)
        } catch {
            held?.release()
            logger.error("cannot start a partition; trying again", ["partition": "\(k)", "error": "\(error)"])
            board.withLock { $0.started(k, ok: false, nowMs: context.clock.nowMs()) }
            return
        }
        run.input.setOnRefused { [counters] _, _ in counters.count("denied") }
        launch(run, named: "partition \(k)") { [self] connected in
            await run.run(after: output, tickInterval: tickInterval, pressure: pressure, logger: logger,
                          partitionsSubscribed: { [self] in partitionsSubscribed() }, connected: connected)
        }
    }

    /// Runs the service's ingress: its session, on the contract's topics,
    /// everything forwarded to the device's partition.
    func startIngress() {
        let settings = context.settings
        // The unpartitioned service's own session: a service that was run
        // unpartitioned finds what waited for it there (and the other way round).
        let session = "tracker-\(service)"
        let store = "tracker-\(service)-in.sqlite"
        let run: IngressRun
        var held: StoreLock?
        do {
            var gate: IngressRun.Gate?
            if let open = definition.ingressGate {
                let path = "\(settings.dataDir)/\(store)"
                held = try StoreLock(path: path + ".lock")
                guard let lock = held else {
                    logger.info("the ingress's store still held by its last owner; trying again")
                    board.withLock { $0.started(partitioning.count, ok: false, nowMs: context.clock.nowMs()) }
                    return
                }
                let db = try Database(path: path, logger: logger)
                gate = IngressRun.Gate(check: try open(IngressGateContext(db: db, topics: topics, logger: logger)), lock: lock)
            }
            let client = try MQTTClient(MQTTOptions(
                host: settings.mqttHost, port: Int32(settings.mqttPort), clientID: session, cleanStart: false,
                sessionExpirySec: 7 * 24 * 3600, username: settings.mqttUsername,
                password: settings.mqttPassword, logger: logger))
            run = IngressRun(k: partitioning.count, client: client, forwarder: forwarder, gate: gate,
                             partitionsSubscribed: { [self] in partitionsSubscribed() })
        } catch {
            held?.release()
            logger.error("cannot start the ingress; trying again", ["error": "\(error)"])
            board.withLock { $0.started(partitioning.count, ok: false, nowMs: context.clock.nowMs()) }
            return
        }
        launch(run, named: "ingress") { [self] connected in
            await run.run(after: output, pressure: pressure, logger: logger, connected: connected)
        }
    }

    /// Runs `run` until it stops (asked, or its session taken), then tells the board.
    private func launch(_ run: any OwnedRun, named name: String,
                        body: @escaping @Sendable (_ connected: @escaping @Sendable () -> Void) async -> Void) {
        let k = run.k
        runs.withLock { $0[k] = run }
        Task.detached { [self] in
            await body { [self] in
                board.withLock { $0.started(k, ok: true, nowMs: context.clock.nowMs()) }
                logger.info("started", ["part": name])
            }
            runs.withLock { _ = $0.removeValue(forKey: k) }
            logger.info("stopped", ["part": name])
            act(board.withLock { $0.stopped(k) })
            run.ended.request()
        }
    }

    /// `{prefix}/_lease/{service}/{k}`, and `…/ingress` for the ingress.
    func leaseTopic(_ k: Int) -> String {
        k == partitioning.count ? topics.lease(service, "ingress") : topics.lease(service, "\(k)")
    }

    /// Every partition stopped (the instance is stopping): each commits,
    /// checkpoints and releases its lease, so the others take over at once.
    func stopAll() async {
        let all = runs.withLock { Array($0.values) }
        for run in all {
            board.withLock { $0.leaving(run.k) }
            run.stop()
        }
        for run in all { await run.ended.wait() }
        await output.drain(timeout: .seconds(3))
    }

    /// Each running partition's stream tips, on `{prefix}/_p/{k}/_health/{service}`,
    /// where that partition's consumers read them.
    /// Published when they changed, and every tenth health anyway (retained:
    /// a broker that lost its retained messages has them again soon).
    func tips() -> [MQTTMessage] {
        let running = runs.withLock { Array($0.values) }
        let now = context.clock.nowMs()
        return running.compactMap { run in
            guard let streams = run.counters?.currentStreams,
                  let topic = topics.underPartition(run.k, topics.health(service)) else { return nil }
            let due = lastTips.withLock { last -> Bool in
                let previous = last[run.k]
                guard previous?.streams != streams || (previous?.unchanged ?? 0) >= 9 else {
                    last[run.k]!.unchanged += 1
                    return false
                }
                last[run.k] = (streams, 0)
                return true
            }
            guard due else { return nil }
            let tips = Health(service: service, status: .online, version: TrackerVersion.current, startedMs: health.startedMs,
                              timeMs: now, instance: context.settings.instance, streams: streams)
            return MQTTMessage(topic: topic, payload: JSONCoding.bytes(tips), retain: true)
        }
    }
}
