import Bus
import FoundationEssentials
import Model
import Synchronization
import TrackerLog

/// What an instance runs of a leased slot: a partition, or the ingress.
protocol OwnedRun: Sendable {
    var k: Int { get }
    /// A partition's own health counters (its queue depth and stream tips).
    var counters: HealthCounters? { get }
    /// Requested once the run is over and the board was told.
    var ended: StopRequest { get }
    func stop()
}

/// One partition run here: its host, its session, and the file lock on its store.
final class PartitionRun<Row>: OwnedRun, @unchecked Sendable {
    let k: Int
    let host: ServiceHost<Row>
    let input: MQTTClient
    let counters: HealthCounters?
    let lock: StoreLock
    private let stopping = StopRequest()
    let ended = StopRequest()

    init(k: Int, host: ServiceHost<Row>, input: MQTTClient, counters: HealthCounters, lock: StoreLock) {
        self.k = k; self.host = host; self.input = input; self.counters = counters; self.lock = lock
    }

    func stop() { stopping.request() }

    func run(after output: MQTTClient, tickInterval: Duration, pressure: OutputPressure, logger: Logger,
             partitionsSubscribed: @escaping @Sendable () -> Bool, connected: @escaping @Sendable () -> Void) async {
        let host = self.host
        ServiceRunner.drive(host, from: input, output: output, pressure: pressure, tickInterval: tickInterval) { host.tick() }
        // What it sends on to another partition (a device of another after a repartition) needs that one's
        // session: once connected and subscribed itself (which takes reading), it reads on when every partition is.
        let subscribed = Locked(false)
        input.setReadGate { [output, pressure] in
            (!subscribed.withLock { $0 } || partitionsSubscribed()) && pressure.allowsReading(waiting: output.inFlight)
        }
        // Another instance took the session: it owns the partition now.
        input.setOnTakenOver { [stopping] in stopping.request() }
        let inputPart = ConnectionPart(input, subscribing: host.subscriptions, after: output, drainTimeout: .seconds(1), logger: logger) {
            subscribed.withLock { $0 = true }
            connected()
        }
        let lifecycle = Lifecycle(host.parts + [Lifecycle.Part("input p\(k)", inputPart)], logger: logger,
                                  signals: { [stopping] in await stopping.wait(); return 0 })
        _ = await lifecycle.run()
        host.close()
        lock.release()
    }
}

/// The service's ingress run here: its session on the contract's topics,
/// each message forwarded to its device's partition (once its gate, if the
/// service has one, lets it through); the batch is acknowledged once the
/// broker holds every copy.
final class IngressRun: OwnedRun, @unchecked Sendable {
    // @unchecked: `gate` is used on the client's network thread only, and closed once that has stopped.
    /// The service's gate (which keeps its own store open), and the lock that fences that store.
    struct Gate {
        let check: any IngressGate
        let lock: StoreLock
    }

    let k: Int
    let client: MQTTClient
    let forwarder: Forwarder
    private var gate: Gate?
    /// Whether every partition's session is at the broker, to forward to.
    let partitionsSubscribed: @Sendable () -> Bool
    var counters: HealthCounters? { nil }
    private let stopping = StopRequest()
    let ended = StopRequest()

    init(k: Int, client: MQTTClient, forwarder: Forwarder, gate: Gate?, partitionsSubscribed: @escaping @Sendable () -> Bool) {
        self.k = k; self.client = client; self.forwarder = forwarder; self.gate = gate; self.partitionsSubscribed = partitionsSubscribed
    }

    func stop() { stopping.request() }

    func run(after output: MQTTClient, pressure: OutputPressure, logger: Logger, connected: @escaping @Sendable () -> Void) async {
        client.setHandler { [self] message in
            if let refused = gate?.check.check(message) { return forwarder.refuse(refused) }
            forwarder.forward(message)
        }
        client.setBeforeAcknowledging { [forwarder] in forwarder.waitForwarded() }
        client.setReadGate { [output, pressure, partitionsSubscribed] in
            partitionsSubscribed() && pressure.allowsReading(waiting: output.inFlight)
        }
        client.setOnTakenOver { [stopping] in stopping.request() }
        let part = ConnectionPart(client, subscribing: forwarder.subscriptions, after: output, drainTimeout: .seconds(1),
                                  logger: logger, connected: connected)
        _ = await Lifecycle([Lifecycle.Part("ingress", part)], logger: logger,
                            signals: { [stopping] in await stopping.wait(); return 0 }).run()
        // The connection has stopped: nothing uses the gate's store any more.
        let lock = gate?.lock
        gate = nil
        lock?.release()
    }
}

/// The instance's partitions as a lifecycle part: nothing to do while the
/// instance runs (the board starts and stops partitions); stopping stops
/// them all, after health and the control connection have stopped.
final class PartitionsPart: LongRunning {
    let stopAll: @Sendable () async -> Void
    let displaced: StopRequest
    /// Called every quarter second until stopped.
    let watch: @Sendable () -> Void
    private let stopping = StopRequest()

    init(stopAll: @escaping @Sendable () async -> Void, displaced: StopRequest, watch: @escaping @Sendable () -> Void) {
        self.stopAll = stopAll; self.displaced = displaced; self.watch = watch
    }

    struct Displaced: Error, CustomStringConvertible {
        var description: String { "another process runs with this instance id" }
    }

    func run() async throws {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.stopping.wait() }
            group.addTask { await self.displaced.wait() }
            group.addTask {
                while !Task.isCancelled {
                    self.watch()
                    await self.stopping.wait(atMost: .milliseconds(250))
                }
            }
            await group.next()
            group.cancelAll()
        }
        await stopAll()
        if displaced.isRequested, !stopping.isRequested { throw Displaced() }
    }

    func stop() { stopping.request() }
}
