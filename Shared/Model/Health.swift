/// A service's health, retained on `tracker/_health/{service}`.
public struct Health: Codable, Sendable, Equatable {
    public enum Status: String, Codable, Sendable { case online, offline }

    public var service: String
    public var status: Status
    public var version: String
    public var startedMs: Int64
    public var timeMs: Int64
    public var processed: Int64
    public var errors: Int64
    /// From the gateway's receipt of the newest fix to this service handling it (0 at the gateway, where receipt is).
    public var lagMs: Int64
    /// How old the newest fix was (its own time to its handling): seconds for
    /// a live phone, days for a replayed recording.
    public var fixAgeMs: Int64?
    public var queueDepth: Int64
    /// How often this is republished, so a reader can tell a silent service.
    public var intervalMs: Int64?
    /// The instance id (client id) of the process behind it.
    public var instance: String?
    /// Service-specific counters (e.g. the gateway's `invalidTopic`).
    public var counters: [String: Int64]?
    /// A condition an operator must see (e.g. the disk is full), while it lasts.
    public var note: String?
    /// The newest seq this producer sent per recently active device, by
    /// stream: a consumer behind it asks for the rest (a lost tail is a gap too).
    public var streams: [String: StreamTips]?
    /// In a partitioned service: the partitions this instance owns now.
    public var partitions: [Int]?
    /// In a partitioned service: the partition count (`partitions`) it runs with.
    public var partitionCount: Int?
    /// In a partitioned service: true while this instance runs the service's
    /// ingress (what comes on the contract's topics, forwarded to partitions).
    public var ingress: Bool?

    public init(service: String, status: Status, version: String, startedMs: Int64, timeMs: Int64,
                processed: Int64 = 0, errors: Int64 = 0, lagMs: Int64 = 0, queueDepth: Int64 = 0,
                intervalMs: Int64? = nil, instance: String? = nil, counters: [String: Int64]? = nil, note: String? = nil,
                streams: [String: StreamTips]? = nil, fixAgeMs: Int64? = nil) {
        self.service = service; self.status = status; self.version = version; self.startedMs = startedMs
        self.timeMs = timeMs; self.processed = processed; self.errors = errors; self.lagMs = lagMs
        self.queueDepth = queueDepth; self.intervalMs = intervalMs; self.instance = instance
        self.counters = counters; self.note = note; self.streams = streams; self.fixAgeMs = fixAgeMs
    }

    /// A fix more than an hour older than its handling: a replayed recording or a phone's backlog, not live.
    public static let replayAgeMs: Int64 = 3_600_000
}

/// One stream's newest seqs, for the devices that sent lately.
public struct StreamTips: Codable, Sendable, Equatable {
    public var epoch: String
    /// Device id → the newest seq sent.
    public var tips: [String: Int64]
    public init(epoch: String, tips: [String: Int64]) { self.epoch = epoch; self.tips = tips }
}

public enum TrackerVersion {
    public static let current = "0.1.0"
}
