/// One fix as a device or a recording publishes it (the contract's input
/// format). `t` stays in seconds so a JSON Lines recording replays unchanged.
public struct DeviceFix: Codable, Sendable, Equatable {
    public var t: Double
    public var lat: Double
    public var lon: Double
    public var acc: Double
    public var speed: Double?
    public var course: Double?
    public var alt: Double?
    public var vacc: Double?
    public var mock: Bool?
    /// The phone's battery, 0–100 % (kept with the fix for forwarding).
    public var batt: Double?

    public init(t: Double, lat: Double, lon: Double, acc: Double, speed: Double? = nil,
                course: Double? = nil, alt: Double? = nil, vacc: Double? = nil, mock: Bool? = nil, batt: Double? = nil) {
        self.t = t; self.lat = lat; self.lon = lon; self.acc = acc
        self.speed = speed; self.course = course; self.alt = alt; self.vacc = vacc; self.mock = mock; self.batt = batt
    }

    public var timeMs: Int64 { Int64((t * 1000).rounded()) }
}

/// Where a raw fix came from.
public enum FixSource: String, Codable, Sendable {
    case device
    case ownTracks = "owntracks"
}

/// A validated, normalized fix as the gateway publishes it on
/// `tracker/{device}/raw`. `(device, seq)` identifies it everywhere downstream.
public struct RawFix: Codable, Sendable, Equatable {
    public var device: DeviceID
    public var seq: Int64
    public var sessionID: String?
    public var timeMs: Int64
    public var receivedMs: Int64
    public var source: FixSource
    public var latitude: Double
    public var longitude: Double
    public var accuracyM: Double
    public var speedMps: Double?
    public var courseDeg: Double?
    public var altitudeM: Double?
    public var verticalAccuracyM: Double?
    public var mock: Bool?
    public var batteryPct: Double?
    /// The gateway store's identity (see `Sequenced`); absent from older gateways.
    public var epoch: String?
    /// The seq of the device's previous raw fix in this epoch (0 before the
    /// first): a consumer that has not seen it knows it missed something.
    public var prev: Int64?

    public init(device: DeviceID, seq: Int64, sessionID: String?, timeMs: Int64, receivedMs: Int64,
                source: FixSource, latitude: Double, longitude: Double, accuracyM: Double,
                speedMps: Double? = nil, courseDeg: Double? = nil, altitudeM: Double? = nil,
                verticalAccuracyM: Double? = nil, mock: Bool? = nil, batteryPct: Double? = nil, epoch: String? = nil,
                prev: Int64? = nil) {
        self.device = device; self.seq = seq; self.sessionID = sessionID; self.timeMs = timeMs
        self.receivedMs = receivedMs; self.source = source; self.latitude = latitude
        self.longitude = longitude; self.accuracyM = accuracyM; self.speedMps = speedMps
        self.courseDeg = courseDeg; self.altitudeM = altitudeM
        self.verticalAccuracyM = verticalAccuracyM; self.mock = mock; self.batteryPct = batteryPct
        self.epoch = epoch; self.prev = prev
    }

    /// Back to the device format, for replayable fixture exports.
    public var deviceFix: DeviceFix {
        DeviceFix(t: Double(timeMs) / 1000, lat: latitude, lon: longitude, acc: accuracyM,
                  speed: speedMps, course: courseDeg, alt: altitudeM, vacc: verticalAccuracyM, mock: mock)
    }
}

/// An accepted, filtered position (the contract's TrackPoint).
public struct TrackPoint: Codable, Sendable, Equatable {
    public var seq: Int64
    public var sessionID: String?
    public var timeMs: Int64
    public var latitude: Double
    public var longitude: Double
    public var accuracyM: Double
    public var speedMps: Double?
    public var courseDeg: Double?
    public var odometerM: Double

    public init(seq: Int64, sessionID: String?, timeMs: Int64, latitude: Double, longitude: Double,
                accuracyM: Double, speedMps: Double? = nil, courseDeg: Double? = nil, odometerM: Double) {
        self.seq = seq; self.sessionID = sessionID; self.timeMs = timeMs; self.latitude = latitude
        self.longitude = longitude; self.accuracyM = accuracyM; self.speedMps = speedMps
        self.courseDeg = courseDeg; self.odometerM = odometerM
    }
}

/// What the device measured for an accepted point (a `Reading`): the fix
/// beside the filter's estimate, so a look-ahead smoother can start from the evidence.
public typealias MeasuredFix = Reading

/// A TrackPoint with its device, as carried on `tracker/{device}/points`.
public struct PointMessage: Codable, Sendable, Equatable {
    public var device: DeviceID
    public var point: TrackPoint
    /// The filter store's identity (see `Sequenced`).
    public var epoch: String?
    /// The fix the point was accepted from (absent from filters before it).
    public var measured: MeasuredFix?
    /// The seq of the device's previous point in this epoch (0 before the first).
    public var prev: Int64?
    /// When the gateway received the fix (absent from filters before it):
    /// health's lag counts from here, so a replayed recording reads as fresh.
    public var receivedMs: Int64?
    public init(device: DeviceID, point: TrackPoint, epoch: String? = nil, measured: MeasuredFix? = nil, prev: Int64? = nil,
                receivedMs: Int64? = nil) {
        self.device = device; self.point = point; self.epoch = epoch; self.measured = measured; self.prev = prev
        self.receivedMs = receivedMs
    }
    public var seq: Int64 { point.seq }
}

/// The filter's position estimate at a decision.
public struct Estimate: Codable, Sendable, Equatable {
    public var latitude: Double
    public var longitude: Double
    public var accuracyM: Double
    public var speedMps: Double?

    public init(latitude: Double, longitude: Double, accuracyM: Double, speedMps: Double? = nil) {
        self.latitude = latitude; self.longitude = longitude; self.accuracyM = accuracyM; self.speedMps = speedMps
    }
}

/// One verdict of the filter on one fix.
public struct Decision: Codable, Sendable, Equatable {
    public var seq: Int64
    public var timeMs: Int64
    public var accepted: Bool
    /// `accepted`, or a rejection reason from the stable vocabulary.
    public var reason: String
    public var estimate: Estimate?
    /// What the deciding gate measured (metres, m/s, sigmas … per gate).
    public var measured: Double?
    public var limit: Double?

    public init(seq: Int64, timeMs: Int64, accepted: Bool, reason: String, estimate: Estimate?,
                measured: Double? = nil, limit: Double? = nil) {
        self.seq = seq; self.timeMs = timeMs; self.accepted = accepted; self.reason = reason
        self.estimate = estimate; self.measured = measured; self.limit = limit
    }
}

/// A tracking session: what `start` opens and `stop` closes.
public struct Session: Codable, Sendable, Equatable {
    public var id: String
    public var device: DeviceID
    public var tag: String?
    public var startMs: Int64
    public var endMs: Int64?
    public var auto: Bool?

    public init(id: String, device: DeviceID, tag: String?, startMs: Int64, endMs: Int64? = nil, auto: Bool? = nil) {
        self.id = id; self.device = device; self.tag = tag; self.startMs = startMs; self.endMs = endMs; self.auto = auto
    }
}

/// Motion state as the motion service publishes it on `tracker/{device}/motion`.
public enum MotionState: String, Codable, Sendable {
    case moving, stopPending, stationary
}

public struct MotionMessage: Codable, Sendable, Equatable {
    public var device: DeviceID
    public var seq: Int64
    public var timeMs: Int64
    public var state: MotionState
    /// The motion store's identity (see `Sequenced`).
    public var epoch: String?
    /// The seq of the device's previous motion message in this epoch (0 before the first).
    public var prev: Int64?
    public init(device: DeviceID, seq: Int64, timeMs: Int64, state: MotionState, epoch: String? = nil, prev: Int64? = nil) {
        self.device = device; self.seq = seq; self.timeMs = timeMs; self.state = state; self.epoch = epoch; self.prev = prev
    }
}

/// What one fix says about where the device is: the fields every stage
/// reads the same way (the services' own fix types carry one of these).
public struct Reading: Codable, Sendable, Equatable {
    public var latitude: Double
    public var longitude: Double
    public var accuracyM: Double
    public var speedMps: Double?
    public var courseDeg: Double?
    /// What else the phone said with the fix, carried to the points it
    /// becomes so forwarding keeps it (the filter does not use them).
    public var altitudeM: Double?
    public var batteryPct: Double?

    public init(latitude: Double, longitude: Double, accuracyM: Double, speedMps: Double? = nil, courseDeg: Double? = nil,
                altitudeM: Double? = nil, batteryPct: Double? = nil) {
        self.latitude = latitude; self.longitude = longitude; self.accuracyM = accuracyM
        self.speedMps = speedMps; self.courseDeg = courseDeg; self.altitudeM = altitudeM; self.batteryPct = batteryPct
    }
}
