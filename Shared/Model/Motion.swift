/// A motion-activity reading from the phone, on `tracker/{device}/activity`.
public struct ActivityReading: Codable, Sendable, Equatable {
    public var activity: String
    /// 33, 66 or 100 (low, medium, high), as the phones report it; 0…100 accepted.
    public var confidence: Int
    /// History read after a gap, not a live reading.
    public var snapshot: Bool?
    /// When it was read, seconds since 1970 (the fix format's unit), if known.
    public var t: Double?

    public init(activity: String, confidence: Int, snapshot: Bool? = nil, t: Double? = nil) {
        self.activity = activity; self.confidence = confidence; self.snapshot = snapshot; self.t = t
    }

    public var isStill: Bool { activity == "still" }
    public var isMoving: Bool { Self.moving.contains(activity) }

    /// The vocabulary of both phone platforms, lower-cased.
    public static let moving: Set<String> = ["walking", "running", "on_foot", "on_bicycle", "in_vehicle", "cycling", "automotive"]
    public static let known: Set<String> = moving.union(["still", "tilting", "unknown"])
}

/// A circular geofence as armed (`addGeofence`).
public struct Geofence: Codable, Sendable, Equatable {
    public var id: String
    public var latitude: Double
    public var longitude: Double
    public var radiusM: Double
    public var notifyOnEntry: Bool
    public var notifyOnExit: Bool
    /// Fire `geofenceDwell` this long after entry, if still inside.
    public var dwellAfterMs: Int64?
    /// Set on fences under `_fleet`, which apply to every device.
    public var fleet: Bool?

    public init(id: String, latitude: Double, longitude: Double, radiusM: Double, notifyOnEntry: Bool = true,
                notifyOnExit: Bool = true, dwellAfterMs: Int64? = nil, fleet: Bool? = nil) {
        self.id = id; self.latitude = latitude; self.longitude = longitude; self.radiusM = radiusM
        self.notifyOnEntry = notifyOnEntry; self.notifyOnExit = notifyOnExit; self.dwellAfterMs = dwellAfterMs; self.fleet = fleet
    }
}

/// One crossing of a fence: an entry, an exit or a dwell.
public struct Crossing: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable { case enter, exit, dwell }
    public var geofenceID: String
    public var kind: Kind
    public var timeMs: Int64
    public var latitude: Double
    public var longitude: Double
    /// Between two fixes, neither of them inside: time and place interpolated.
    public var interpolated: Bool?
    /// A fence under `_fleet`.
    public var fleet: Bool?
    /// The device, in stored history (an event names it already).
    public var device: DeviceID?

    private enum CodingKeys: String, CodingKey { case geofenceID, kind, timeMs, latitude, longitude, interpolated, fleet, device }

    /// In an event the type names the kind (`geofenceEnter` …), so it may be absent there.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        geofenceID = try c.decode(String.self, forKey: .geofenceID)
        kind = try c.decodeIfPresent(Kind.self, forKey: .kind) ?? .enter
        timeMs = try c.decode(Int64.self, forKey: .timeMs)
        latitude = try c.decode(Double.self, forKey: .latitude)
        longitude = try c.decode(Double.self, forKey: .longitude)
        interpolated = try c.decodeIfPresent(Bool.self, forKey: .interpolated)
        fleet = try c.decodeIfPresent(Bool.self, forKey: .fleet)
        device = try c.decodeIfPresent(DeviceID.self, forKey: .device)
    }

    public init(geofenceID: String, kind: Kind, timeMs: Int64, latitude: Double, longitude: Double,
                interpolated: Bool? = nil, fleet: Bool? = nil) {
        self.geofenceID = geofenceID; self.kind = kind; self.timeMs = timeMs; self.latitude = latitude
        self.longitude = longitude; self.interpolated = interpolated; self.fleet = fleet
    }
}

/// A settled stop, from arrival to departure.
public struct Stop: Codable, Sendable, Equatable {
    public var arrivalMs: Int64
    public var departureMs: Int64?
    /// The centroid of the fixes inside the stop.
    public var latitude: Double
    public var longitude: Double
    public var sessionID: String?

    public init(arrivalMs: Int64, departureMs: Int64? = nil, latitude: Double, longitude: Double, sessionID: String? = nil) {
        self.arrivalMs = arrivalMs; self.departureMs = departureMs; self.latitude = latitude; self.longitude = longitude
        self.sessionID = sessionID
    }

    public var durationSec: Double? { departureMs.map { Double($0 - arrivalMs) / 1000 } }
}

/// A trip between two stops.
public struct Trip: Codable, Sendable, Equatable {
    public var startMs: Int64
    public var endMs: Int64?
    public var startLatitude: Double
    public var startLongitude: Double
    public var endLatitude: Double?
    public var endLongitude: Double?
    /// Along the accepted points (the filter's odometer difference).
    public var distanceM: Double
    public var maxSpeedMps: Double
    /// The odometer at the start, for the distance.
    public var startOdometerM: Double
    public var sessionID: String?

    public init(startMs: Int64, startLatitude: Double, startLongitude: Double, startOdometerM: Double, sessionID: String? = nil) {
        self.startMs = startMs; self.startLatitude = startLatitude; self.startLongitude = startLongitude
        self.distanceM = 0; self.maxSpeedMps = 0; self.startOdometerM = startOdometerM; self.sessionID = sessionID
    }

    public var durationSec: Double? { endMs.map { Double($0 - startMs) / 1000 } }
    public var averageSpeedMps: Double? { durationSec.flatMap { $0 > 0 ? distanceM / $0 : nil } }
}

/// A trip or a stop as the reports return them: with duration and average speed filled in.
public struct TripReport: Encodable, Sendable {
    public var trip: Trip
    public init(_ trip: Trip) { self.trip = trip }
    private enum Key: String, CodingKey { case durationSec, averageSpeedMps }
    public func encode(to encoder: any Encoder) throws {
        try trip.encode(to: encoder)
        var c = encoder.container(keyedBy: Key.self)
        try c.encodeIfPresent(trip.durationSec, forKey: .durationSec)
        try c.encodeIfPresent(trip.averageSpeedMps, forKey: .averageSpeedMps)
    }
}

/// The live track of a device, retained on `tracker/{device}/live` (QoS 0,
/// conflated): where it is now, where it just was, and its session so far.
public struct LiveFrame: Codable, Sendable, Equatable {
    public var device: DeviceID
    public var timeMs: Int64
    public var latitude: Double
    public var longitude: Double
    public var accuracyM: Double
    public var speedMps: Double?
    public var headingDeg: Double?
    public var motion: MotionState?
    /// The recent path, simplified, oldest first: `[latitude, longitude]` pairs.
    public var tail: [[Double]]
    public var session: LiveSession?

    public init(device: DeviceID, timeMs: Int64, latitude: Double, longitude: Double, accuracyM: Double, speedMps: Double?,
                headingDeg: Double?, motion: MotionState?, tail: [[Double]], session: LiveSession?) {
        self.device = device; self.timeMs = timeMs; self.latitude = latitude; self.longitude = longitude
        self.accuracyM = accuracyM; self.speedMps = speedMps; self.headingDeg = headingDeg; self.motion = motion
        self.tail = tail; self.session = session
    }
}

/// A session's running figures, as the live frame carries them.
public struct LiveSession: Codable, Sendable, Equatable {
    public var id: String
    public var startMs: Int64
    /// The filter's odometer since the session's first point.
    public var distanceM: Double
    public var durationSec: Double
    public var points: Int
    public var maxSpeedMps: Double

    public init(id: String, startMs: Int64, distanceM: Double, durationSec: Double, points: Int, maxSpeedMps: Double) {
        self.id = id; self.startMs = startMs; self.distanceM = distanceM; self.durationSec = durationSec
        self.points = points; self.maxSpeedMps = maxSpeedMps
    }
}
