import FoundationEssentials
import Model

/// A fix as the filter sees it (`fix.latitude` reads its `reading`).
@dynamicMemberLookup
public struct FilterInput: Codable, Sendable, Equatable {
    public var seq: Int64
    public var sessionID: String?
    public var timeMs: Int64
    public var reading: Reading
    /// When the fix reached the gateway (ms), if known.
    public var receivedMs: Int64?
    /// How many times its reported accuracy the filter judges the fix with,
    /// when the device's accuracy says nothing (`AccuracyCalibration`); nil: 1.
    public var accuracyScale: Double?

    public init(seq: Int64, sessionID: String?, timeMs: Int64, latitude: Double, longitude: Double,
                accuracyM: Double, speedMps: Double? = nil, courseDeg: Double? = nil, receivedMs: Int64? = nil,
                altitudeM: Double? = nil, batteryPct: Double? = nil) {
        self.seq = seq; self.sessionID = sessionID; self.timeMs = timeMs
        self.reading = Reading(latitude: latitude, longitude: longitude, accuracyM: accuracyM, speedMps: speedMps, courseDeg: courseDeg,
                               altitudeM: altitudeM, batteryPct: batteryPct)
        self.receivedMs = receivedMs
    }

    /// The accuracy the filter judges the fix with (m): the reported one, 0
    /// read as unknown, times its scale. The reading itself stays as reported.
    public var judgedAccuracyM: Double { Accuracy.meters(reading.accuracyM) * (accuracyScale ?? 1) }

    public subscript<T>(dynamicMember path: WritableKeyPath<Reading, T>) -> T {
        get { reading[keyPath: path] }
        set { reading[keyPath: path] = newValue }
    }

    /// A fix in the device format (a recording's line), with the platforms'
    /// negative "unknown" speed and course made absent as the gateway does.
    public init(_ fix: DeviceFix, seq: Int64, sessionID: String? = nil) {
        self.init(seq: seq, sessionID: sessionID, timeMs: fix.timeMs, latitude: fix.lat, longitude: fix.lon,
                  accuracyM: fix.acc, speedMps: fix.speed.flatMap { $0 < 0 ? nil : $0 },
                  courseDeg: fix.course.flatMap { $0 < 0 ? nil : $0 })
    }

    public init(_ raw: RawFix) {
        self.init(seq: raw.seq, sessionID: raw.sessionID, timeMs: raw.timeMs, latitude: raw.latitude,
                  longitude: raw.longitude, accuracyM: raw.accuracyM, speedMps: raw.speedMps, courseDeg: raw.courseDeg,
                  receivedMs: raw.receivedMs > 0 ? raw.receivedMs : nil, altitudeM: raw.altitudeM, batteryPct: raw.batteryPct)
    }
}

/// The verdict on one fix.
public struct Verdict: Codable, Sendable, Equatable {
    public var decision: Decision
    /// The point to publish when accepted.
    public var point: TrackPoint?
    public var rejection: RejectReason?
    /// Taken by the Kalman filter, point not yet decided: the filter's step,
    /// from which the point is placed (at once, or smoothed later).
    var step: FilterStep?
    /// A "still here" point: published at the last point's place.
    var standing = false

    /// Accepted, or about to be placed.
    var taken: Bool { point != nil || step != nil }
}

/// One update of the Kalman filter: what it predicted and what it made of
/// the fix, in the local frame of the time.
public struct FilterStep: Codable, Sendable, Equatable {
    public var frame: LocalFrame
    /// The filter's time before the step, and after it (the fix's) (ms).
    public var priorTimeMs: Int64, timeMs: Int64
    public var predictedEast: AxisFilter, predictedNorth: AxisFilter
    public var east: AxisFilter, north: AxisFilter
}
