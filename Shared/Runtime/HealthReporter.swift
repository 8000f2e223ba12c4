import Bus
import TrackerLog
import FoundationEssentials
import Model
import Synchronization

/// Counters a service bumps as it works; published as its health.
public final class HealthCounters: Sendable {
    private let state = Mutex(Values())
    /// In a struct: a Mutex of a bare closure rewraps it on every read (see NetworkLoop.Callbacks).
    private struct DepthSource { var read: (@Sendable () -> Int64)? }
    private let queueDepthSource = Mutex(DepthSource())
    private struct StreamsSource { var read: (@Sendable () -> [String: StreamTips])? }
    private let streamsSource = Mutex(StreamsSource())

    struct Values {
        var processed: Int64 = 0
        var errors: Int64 = 0
        var lagMs: Int64 = 0
        var fixAgeMs: Int64?
        var queueDepth: Int64 = 0
        var extra: [String: Int64] = [:]
        var note: String?
        var streams: [String: StreamTips]?
    }

    /// Where the counts go instead, for a partition's counters: its
    /// instance's health says them; the partition keeps only its own queue
    /// depth and stream tips.
    private let parent: HealthCounters?

    public init(forwardingTo parent: HealthCounters? = nil) { self.parent = parent }

    public func processed(_ n: Int64 = 1) { if let parent { parent.processed(n) } else { state.withLock { $0.processed += n } } }
    public func error(_ n: Int64 = 1) { if let parent { parent.error(n) } else { state.withLock { $0.errors += n } } }
    public func lag(_ ms: Int64) { if let parent { parent.lag(ms) } else { state.withLock { $0.lagMs = max(0, ms) } } }
    public func fixAge(_ ms: Int64) { if let parent { parent.fixAge(ms) } else { state.withLock { $0.fixAgeMs = max(0, ms) } } }
    public func queueDepth(_ n: Int64) { state.withLock { $0.queueDepth = n } }
    /// Reads the queue depth whenever health is published, instead of a set value.
    public func queueDepth(_ source: @escaping @Sendable () -> Int64) { queueDepthSource.withLock { $0.read = source } }
    /// Reads a producer's stream tips whenever health is published.
    public func streams(_ source: @escaping @Sendable () -> [String: StreamTips]) { streamsSource.withLock { $0.read = source } }
    public func count(_ name: String, _ n: Int64 = 1) {
        if let parent { parent.count(name, n) } else { state.withLock { $0.extra[name, default: 0] += n } }
    }
    /// What `count` has summed for `name` so far (for benchmarks).
    public func counted(_ name: String) -> Int64 {
        parent?.counted(name) ?? state.withLock { $0.extra[name] ?? 0 }
    }
    /// A figure that is set, not summed (the uploader's oldest queued point's age).
    public func set(_ name: String, _ value: Int64?) { if let parent { parent.set(name, value) } else { state.withLock { $0.extra[name] = value } } }
    /// Sets (or, with nil, clears) the note health carries.
    public func note(_ text: String?) { if let parent { parent.note(text) } else { state.withLock { $0.note = text } } }

    /// The queue depth as health would say it now.
    public var currentQueueDepth: Int64 {
        queueDepthSource.withLock({ $0.read })?() ?? state.withLock { $0.queueDepth }
    }

    /// The stream tips as health would say them now.
    public var currentStreams: [String: StreamTips]? { streamsSource.withLock({ $0.read })?() }

    /// The messages taken so far, without reading the queue depth or the stream tips as `snapshot` does.
    var processedCount: Int64 { state.withLock { $0.processed } }

    func snapshot() -> Values {
        var values = state.withLock { $0 }
        if let source = queueDepthSource.withLock({ $0.read }) { values.queueDepth = source() }
        if let source = streamsSource.withLock({ $0.read }) { values.streams = source() }
        return values
    }
}

/// Publishes `tracker/_health/{service}` (retained) every interval, and
/// provides the last will that marks the service offline if it dies.
public struct HealthReporter: Sendable {
    public let service: String
    public let instance: String
    public let topic: String
    public let interval: Duration
    public let counters: HealthCounters
    public let startedMs: Int64
    let clock: any WallClock

    /// In a partitioned service: the partitions owned now (the ingress as
    /// partition `partitionCount`), and how many there are.
    let partitions: (@Sendable () -> [Int])?
    let partitionCount: Int?

    /// `topic`: where it is published, `tracker/_health/{service}` unless
    /// given (each instance of a partitioned service has its own).
    public init(service: String, instance: String, topics: Topics, interval: Duration,
                counters: HealthCounters, clock: any WallClock = SystemWallClock(), topic: String? = nil,
                partitionCount: Int? = nil, partitions: (@Sendable () -> [Int])? = nil) {
        self.service = service
        self.instance = instance
        self.topic = topic ?? topics.health(service)
        self.partitions = partitions
        self.partitionCount = partitionCount
        self.interval = interval
        self.counters = counters
        self.clock = clock
        self.startedMs = clock.nowMs()
    }

    public func health(_ status: Health.Status) -> Health {
        let values = counters.snapshot()
        var health = Health(service: service, status: status, version: TrackerVersion.current, startedMs: startedMs,
                      timeMs: clock.nowMs(), processed: values.processed, errors: values.errors,
                      lagMs: values.lagMs, queueDepth: values.queueDepth,
                      intervalMs: interval.milliseconds,
                      instance: instance, counters: values.extra.isEmpty ? nil : values.extra, note: values.note,
                      streams: values.streams, fixAgeMs: values.fixAgeMs)
        if let partitionCount, let running = partitions?() {
            health.partitionCount = partitionCount
            health.partitions = running.filter { $0 < partitionCount }
            health.ingress = running.contains(partitionCount)
        }
        return health
    }

    public func message(_ status: Health.Status) -> MQTTMessage {
        MQTTMessage(topic: topic, payload: JSONCoding.bytes(health(status)), qos: .atLeastOnce, retain: true)
    }

    /// The will: the broker publishes it when the connection dies uncleanly.
    public var will: MQTTMessage { message(.offline) }
}

/// Publishes health every interval until stopped. `ready` says whether the
/// service takes messages now (its input is connected and subscribed);
/// `online` is published only then.
public final class HealthPart: LongRunning {
    let reporter: HealthReporter
    let client: MQTTClient
    let ready: @Sendable () -> Bool
    /// Published with each health (a partitioned service's tips, per partition).
    let alongside: @Sendable () -> [MQTTMessage]
    let logger: Logger
    private let stopping = StopRequest()

    public init(_ reporter: HealthReporter, on client: MQTTClient, logger: Logger, ready: @escaping @Sendable () -> Bool,
                alongside: @escaping @Sendable () -> [MQTTMessage] = { [] }) {
        self.reporter = reporter; self.client = client; self.logger = logger; self.ready = ready; self.alongside = alongside
    }

    public func run() async {
        var failures = 0
        while !stopping.isRequested {
            if ready() {
                do {
                    try client.publish(reporter.message(.online))
                    for message in alongside() { try client.publish(message) }
                    failures = 0
                } catch {
                    // The next interval publishes a fresh one; said once per run of failures.
                    if failures == 0 { logger.warning("health not published", ["error": "\(error)"]) }
                    failures += 1
                }
            }
            await stopping.wait(atMost: reporter.interval)
        }
    }

    public func stop() { stopping.request() }
}
