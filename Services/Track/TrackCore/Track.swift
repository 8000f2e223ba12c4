import FoundationEssentials
import Model

/// A stored point: the filter's estimate and, when the filter sent it, the fix it came from.
public struct StoredPoint: Codable, Sendable, Equatable {
    public var point: TrackPoint
    public var measured: MeasuredFix?
    public init(point: TrackPoint, measured: MeasuredFix? = nil) { self.point = point; self.measured = measured }
}

/// How a track is built (`buildTrack {sessionID, options}`); every field has a default.
public struct TrackOptions: Codable, Sendable, Equatable {
    /// Douglas–Peucker tolerance, metres (0: no simplification).
    public var simplifyToleranceM: Double = 5
    /// An arrow every this many metres along moving segments (0: none).
    public var arrowEveryM: Double = 250
    /// The fixed-interval smoother over the moving segments.
    public var smooth: Bool = true
    /// A silence at least this long that resumes at least `gapMinDistanceM` away is a gap.
    public var gapAfterSec: Double = 600
    public var gapMinDistanceM: Double = 250
    /// A stop: staying within this radius at least `stopMinSec`.
    public var stopRadiusM: Double = 30
    public var stopMinSec: Double = 120

    public init() {}

    private enum Key: String, CodingKey {
        case simplifyToleranceM, arrowEveryM, smooth, gapAfterSec, gapMinDistanceM, stopRadiusM, stopMinSec
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Key.self)
        func read(_ key: Key, _ fallback: Double, _ range: ClosedRange<Double>) throws -> Double {
            guard let value = try c.decodeIfPresent(Double.self, forKey: key) else { return fallback }
            guard value.isFinite, range.contains(value) else {
                throw DecodingError.dataCorruptedError(forKey: key, in: c, debugDescription:
                    "must be within \(range.lowerBound)…\(range.upperBound), got \(value)")
            }
            return value
        }
        simplifyToleranceM = try read(.simplifyToleranceM, 5, 0...10_000)
        arrowEveryM = try read(.arrowEveryM, 250, 0...1_000_000)
        smooth = try c.decodeIfPresent(Bool.self, forKey: .smooth) ?? true
        gapAfterSec = try read(.gapAfterSec, 600, 1...31_536_000)
        gapMinDistanceM = try read(.gapMinDistanceM, 250, 0...10_000_000)
        stopRadiusM = try read(.stopRadiusM, 30, 1...10_000)
        stopMinSec = try read(.stopMinSec, 120, 1...86_400)
    }
}

/// One vertex of a drawn line.
public struct Vertex: Codable, Sendable, Equatable {
    public var latitude: Double
    public var longitude: Double
    public var timeMs: Int64
    public init(latitude: Double, longitude: Double, timeMs: Int64) {
        self.latitude = latitude; self.longitude = longitude; self.timeMs = timeMs
    }
}

/// A direction marker along a moving segment.
public struct Arrow: Codable, Sendable, Equatable {
    public var latitude: Double
    public var longitude: Double
    public var bearingDeg: Double
}

/// A stop drawn as one node: the drift of a parked device consolidated.
public struct StopNode: Codable, Sendable, Equatable {
    public var latitude: Double
    public var longitude: Double
    public var arrivalMs: Int64
    public var departureMs: Int64
    public var durationSec: Double
}

/// How fast a moving segment goes, for colouring.
public enum SpeedBand: String, Codable, Sendable, CaseIterable {
    case walk, slow, medium, fast

    /// Under 2.5 m/s (9 km/h), 8 m/s (29 km/h), 17 m/s (61 km/h), and above.
    public init(speedMps: Double) {
        self = speedMps < 2.5 ? .walk : speedMps < 8 ? .slow : speedMps < 17 ? .medium : .fast
    }
}

public struct Segment: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable { case moving, stop, gap }
    public var kind: Kind
    public var startMs: Int64
    public var endMs: Int64
    /// The line (moving: smoothed and simplified; gap: its two ends; stop: the node).
    public var vertices: [Vertex]
    /// Along the line before simplification; 0 for stops and gaps (a gap's straight line is in `gapDistanceM`).
    public var distanceM: Double
    public var speedBand: SpeedBand?
    public var averageSpeedMps: Double?
    public var maxSpeedMps: Double?
    public var arrows: [Arrow]?
    public var stop: StopNode?
    /// A gap's straight line: a lower bound of what the device covered unseen.
    public var gapDistanceM: Double?
}

public struct TrackStatistics: Codable, Sendable, Equatable {
    /// Along the moving segments; gaps contribute nothing.
    public var observedDistanceM: Double
    public var durationSec: Double
    public var movingSec: Double
    public var stoppedSec: Double
    public var maxSpeedMps: Double
    public var averageMovingSpeedMps: Double
    public var points: Int
    public var movingSegments: Int
    public var stops: Int
    public var gaps: Int
}

/// A built track, versioned so consumers can tell future shapes apart.
public struct Track: Codable, Sendable, Equatable {
    public var version = 1
    public var device: DeviceID
    public var sessionID: String?
    public var startMs: Int64?
    public var endMs: Int64?
    public var segments: [Segment]
    public var statistics: TrackStatistics
    /// Set when the moving segments were snapped to roads (`roadSnapUrl`).
    public var roadSnapped: Bool?
    /// What did not go as asked (a road-snapping server that failed, …).
    public var diagnostics: [String]?
}
