import FoundationEssentials
import Model

/// A queued point: the accepted point with its device, and what the phone
/// said with the fix that the point itself does not carry.
public struct QueuedPoint: Sendable, Equatable {
    public var device: DeviceID
    public var point: TrackPoint
    /// The filter store's identity the point's seq belongs to.
    public var epoch: String
    public var altitudeM: Double?
    public var batteryPct: Double?

    public init(device: DeviceID, point: TrackPoint, epoch: String = "", altitudeM: Double? = nil, batteryPct: Double? = nil) {
        self.device = device; self.point = point; self.epoch = epoch; self.altitudeM = altitudeM; self.batteryPct = batteryPct
    }

    /// `device:epoch:seq`: unambiguous, since neither a device id nor an epoch holds a colon.
    public var key: String { "\(device):\(epoch):\(point.seq)" }
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
    /// The requests for one batch: one POST for `json` under the batch's
    /// `key` (fixed when the batch was formed, so a retry resends the same
    /// points under the same key), one per point for `osmand` under the point's.
    public static func make(_ batch: [QueuedPoint], key: String, config: SyncConfig) -> [UploadRequest] {
        switch config.format {
        case .json: [json(batch, key: key, config: config)]
        case .osmand: batch.map { osmand($0, config: config) }
        }
    }

    /// `{"device": D (when the batch has one), "points": [{device, seq, …TrackPoint, altitudeM?, batteryPct?}]}`.
    static func json(_ batch: [QueuedPoint], key: String, config: SyncConfig) -> UploadRequest {
        var w = JSONWriter()
        w.beginObject()
        let devices = Set(batch.map(\.device))
        if devices.count == 1, let only = devices.first { w.field("device", only) }
        w.key("points")
        w.beginArray()
        for q in batch {
            q.point.write(to: &w) { w in
                w.field("altitudeM", q.altitudeM)
                w.field("batteryPct", q.batteryPct)
                w.field("device", q.device)
            }
        }
        w.endArray()
        w.endObject()
        var headers = config.headers
        headers.setHeader("Content-Type", "application/json")
        headers.setHeader("Idempotency-Key", key)
        return UploadRequest(method: "POST", url: config.url, headers: headers, body: w.bytes)
    }

    /// OsmAnd: `?id=…&timestamp=…&lat=…&lon=…&accuracy=…&speed=…&bearing=…&altitude=…&batt=…`
    /// as Traccar's `OsmAndProtocolDecoder` reads it: speed in knots, the
    /// timestamp in milliseconds (it reads a value past 2^31 as ms), battery in %.
    static func osmand(_ q: QueuedPoint, config: SyncConfig) -> UploadRequest {
        var components = URLComponents(string: config.url) ?? URLComponents()
        var items = components.queryItems ?? []
        let p = q.point
        items += [
            URLQueryItem(name: "id", value: q.device.rawValue),
            URLQueryItem(name: "timestamp", value: String(p.timeMs)),
            URLQueryItem(name: "lat", value: p.latitude.fixed(7)),
            URLQueryItem(name: "lon", value: p.longitude.fixed(7)),
            URLQueryItem(name: "accuracy", value: p.accuracyM.fixed(1)),
        ]
        if let speed = p.speedMps { items.append(URLQueryItem(name: "speed", value: (speed * 3600 / 1852).fixed(2))) }
        if let course = p.courseDeg { items.append(URLQueryItem(name: "bearing", value: course.fixed(1))) }
        if let altitude = q.altitudeM { items.append(URLQueryItem(name: "altitude", value: altitude.fixed(1))) }
        if let battery = q.batteryPct { items.append(URLQueryItem(name: "batt", value: battery.fixed(0))) }
        components.queryItems = items
        var headers = config.headers
        headers.setHeader("Idempotency-Key", q.key)
        return UploadRequest(method: "POST", url: components.string ?? config.url, headers: headers, body: nil)
    }
}

extension [String: String] {
    /// A header of the request's own, replacing one the configuration gave
    /// under any spelling: header names are case-insensitive, so both would go out.
    mutating func setHeader(_ name: String, _ value: String) {
        let spellings = keys.filter { $0.lowercased() == name.lowercased() }
        for key in spellings { removeValue(forKey: key) }
        self[name] = value
    }
}
