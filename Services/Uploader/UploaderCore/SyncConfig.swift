import FoundationEssentials

/// Where and how the uploader delivers points (`configureSync`, or
/// `config/uploader.json`'s `sync`). Only `url` is required; every other key
/// has a default, so an older file still decodes.
public struct SyncConfig: Codable, Sendable, Equatable {
    public enum Format: String, Codable, Sendable, CaseIterable {
        /// One POST per batch: `{"device"?, "points": [...]}`, every point with its `device` and `seq`.
        case json
        /// The OsmAnd protocol Traccar servers ingest: one request per point, fields in the query.
        case osmand
    }

    public var url: String
    public var headers: [String: String] = [:]
    public var autoSync = true
    public var batchSize = 200
    /// Upload once this many points are queued (with `autoSync`).
    public var autoSyncThreshold = 1
    /// Fewer than `batchSize` points wait this long after the last request
    /// (with `autoSync`), so points that come close together share one
    /// request instead of one each; 0 sends at once.
    public var coalesceMs = 250
    public var retryBaseDelaySec = 1.0
    public var retryMaxDelaySec = 300.0
    public var maxDaysToPersist = 30.0
    public var maxRecordsToPersist = 1_000_000
    public var stopTrackingOnAuthExpiry = false
    public var httpTimeoutMs = 10_000
    public var format = Format.json

    public init(url: String) { self.url = url }

    private enum Key: String, CodingKey {
        case url, headers, autoSync, batchSize, autoSyncThreshold, coalesceMs, retryBaseDelaySec, retryMaxDelaySec
        case maxDaysToPersist, maxRecordsToPersist, stopTrackingOnAuthExpiry, httpTimeoutMs, format
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Key.self)
        url = try c.decode(String.self, forKey: .url)
        headers = try c.decodeIfPresent([String: String].self, forKey: .headers) ?? [:]
        autoSync = try c.decodeIfPresent(Bool.self, forKey: .autoSync) ?? true
        batchSize = try c.decodeIfPresent(Int.self, forKey: .batchSize) ?? 200
        autoSyncThreshold = try c.decodeIfPresent(Int.self, forKey: .autoSyncThreshold) ?? 1
        coalesceMs = try c.decodeIfPresent(Int.self, forKey: .coalesceMs) ?? 250
        retryBaseDelaySec = try c.decodeIfPresent(Double.self, forKey: .retryBaseDelaySec) ?? 1
        retryMaxDelaySec = try c.decodeIfPresent(Double.self, forKey: .retryMaxDelaySec) ?? 300
        maxDaysToPersist = try c.decodeIfPresent(Double.self, forKey: .maxDaysToPersist) ?? 30
        maxRecordsToPersist = try c.decodeIfPresent(Int.self, forKey: .maxRecordsToPersist) ?? 1_000_000
        stopTrackingOnAuthExpiry = try c.decodeIfPresent(Bool.self, forKey: .stopTrackingOnAuthExpiry) ?? false
        httpTimeoutMs = try c.decodeIfPresent(Int.self, forKey: .httpTimeoutMs) ?? 10_000
        format = try c.decodeIfPresent(Format.self, forKey: .format) ?? .json
    }

    /// This config, or a refusal naming the first setting that cannot work.
    public func validated() throws -> SyncConfig {
        guard let parsed = URL(string: url), let scheme = parsed.scheme?.lowercased(), ["http", "https"].contains(scheme),
              let host = parsed.host, !host.isEmpty else {
            throw SyncConfigError("url", "must be an http or https URL with a host, got '\(url.prefix(200))'")
        }
        for (name, value) in headers {
            guard !name.isEmpty, name.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: ":") }) else {
                throw SyncConfigError("headers", "'\(name.prefix(80))' is not a valid header name")
            }
            guard !value.contains(where: \.isNewline) else { throw SyncConfigError("headers", "the value of '\(name)' contains a line break") }
        }
        // Header names are case-insensitive: two spellings of one would both go out.
        let names = Dictionary(grouping: headers.keys, by: { $0.lowercased() })
        if let twice = names.values.first(where: { $0.count > 1 }) {
            throw SyncConfigError("headers", "\(twice.sorted().map { "'\($0.prefix(80))'" }.joined(separator: " and ")) are the same header")
        }
        try check("batchSize", Double(batchSize), 1...10_000)
        try check("autoSyncThreshold", Double(autoSyncThreshold), 1...1_000_000)
        try check("coalesceMs", Double(coalesceMs), 0...60_000)
        try check("retryBaseDelaySec", retryBaseDelaySec, 0.01...3_600)
        try check("retryMaxDelaySec", retryMaxDelaySec, retryBaseDelaySec...86_400)
        try check("maxDaysToPersist", maxDaysToPersist, 0.01...3_650)
        try check("maxRecordsToPersist", Double(maxRecordsToPersist), 100...1_000_000_000)
        try check("httpTimeoutMs", Double(httpTimeoutMs), 100...600_000)
        return self
    }

    private func check(_ name: String, _ value: Double, _ range: ClosedRange<Double>) throws {
        guard value.isFinite, range.contains(value) else {
            throw SyncConfigError(name, "must be within \(range.lowerBound.shortText)…\(range.upperBound.shortText), got \(value.shortText)")
        }
    }

    /// For replies, health and logs: header values are secrets (`Authorization`), and so is a URL's password.
    public var masked: SyncConfig {
        var copy = self
        copy.headers = headers.mapValues { _ in "***" }
        if var components = URLComponents(string: url), components.password != nil {
            components.password = "***"
            copy.url = components.string ?? "***"
        }
        return copy
    }
}

public struct SyncConfigError: Error, CustomStringConvertible, Sendable {
    public let setting: String
    public let problem: String
    public init(_ setting: String, _ problem: String) { self.setting = setting; self.problem = problem }
    public var description: String { "\(setting): \(problem)" }
}
