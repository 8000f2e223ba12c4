import Foundation
import Model

/// A queued point: the accepted point with its device.
public struct QueuedPoint: Sendable, Equatable {
    public var device: DeviceID
    public var point: TrackPoint
    public init(device: DeviceID, point: TrackPoint) { self.device = device; self.point = point }
}

/// One HTTP request to make.
public struct UploadRequest: Sendable, Equatable {
    public var method: String
    public var url: String
    public var headers: [String: String]
    public var body: [UInt8]?

    public init(method: String, url: String, headers: [String: String], body: [UInt8]?) {
        self.method = method; self.url = url; self.headers = headers; self.body = body
    }
}

public enum Requests {
    /// The requests for one batch: one POST for `json`, one per point for `osmand`.
    public static func make(_ batch: [QueuedPoint], config: SyncConfig) -> [UploadRequest] {
        switch config.format {
        case .json: [json(batch, config: config)]
        case .osmand: batch.map { osmand($0, config: config) }
        }
    }

    /// `{"device": D (when the batch has one), "points": [{device, seq, …TrackPoint}]}`,
    /// with an `Idempotency-Key` that names the batch's points (the same on every retry).
    static func json(_ batch: [QueuedPoint], config: SyncConfig) -> UploadRequest {
        var w = JSONWriter()
        w.beginObject()
        let devices = Set(batch.map(\.device))
        if devices.count == 1, let only = devices.first { w.field("device", only) }
        w.key("points")
        w.beginArray()
        for q in batch { q.point.write(to: &w) { $0.field("device", q.device) } }
        w.endArray()
        w.endObject()
        var headers = config.headers
        headers["Content-Type"] = "application/json"
        headers["Idempotency-Key"] = idempotencyKey(batch)
        return UploadRequest(method: "POST", url: config.url, headers: headers, body: w.bytes)
    }

    /// OsmAnd: `?id=…&timestamp=…&lat=…&lon=…&speed=…&bearing=…&accuracy=…`,
    /// speed in knots as Traccar's OsmAnd decoder reads it, timestamp in seconds.
    static func osmand(_ q: QueuedPoint, config: SyncConfig) -> UploadRequest {
        var components = URLComponents(string: config.url) ?? URLComponents()
        var items = components.queryItems ?? []
        let p = q.point
        items += [
            URLQueryItem(name: "id", value: q.device.rawValue),
            URLQueryItem(name: "timestamp", value: String(p.timeMs / 1000)),
            URLQueryItem(name: "lat", value: String(format: "%.7f", p.latitude)),
            URLQueryItem(name: "lon", value: String(format: "%.7f", p.longitude)),
            URLQueryItem(name: "accuracy", value: String(format: "%.1f", p.accuracyM)),
        ]
        if let speed = p.speedMps { items.append(URLQueryItem(name: "speed", value: String(format: "%.2f", speed * 3600 / 1852))) }
        if let course = p.courseDeg { items.append(URLQueryItem(name: "bearing", value: String(format: "%.1f", course))) }
        components.queryItems = items
        var headers = config.headers
        headers["Idempotency-Key"] = idempotencyKey([q])
        return UploadRequest(method: "POST", url: components.string ?? config.url, headers: headers, body: nil)
    }

    /// The same for the same points: first and last `device:seq` and the count.
    public static func idempotencyKey(_ batch: [QueuedPoint]) -> String {
        guard let first = batch.first, let last = batch.last else { return "empty" }
        return "\(first.device):\(first.point.seq)-\(last.device):\(last.point.seq)-\(batch.count)"
    }
}
