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
    public var lagMs: Int64
    public var queueDepth: Int64
    /// How often this is republished, so a reader can tell a silent service.
    public var intervalMs: Int64?
    /// The instance id (client id) of the process behind it.
    public var instance: String?
    /// Service-specific counters (e.g. the gateway's `invalidTopic`).
    public var counters: [String: Int64]?
    /// A condition an operator must see (e.g. the disk is full), while it lasts.
    public var note: String?

    public init(service: String, status: Status, version: String, startedMs: Int64, timeMs: Int64,
                processed: Int64 = 0, errors: Int64 = 0, lagMs: Int64 = 0, queueDepth: Int64 = 0,
                intervalMs: Int64? = nil, instance: String? = nil, counters: [String: Int64]? = nil, note: String? = nil) {
        self.service = service; self.status = status; self.version = version; self.startedMs = startedMs
        self.timeMs = timeMs; self.processed = processed; self.errors = errors; self.lagMs = lagMs
        self.queueDepth = queueDepth; self.intervalMs = intervalMs; self.instance = instance
        self.counters = counters; self.note = note
    }
}

public enum TrackerVersion {
    public static let current = "0.1.0"
}
