import Foundation
import Model

/// A device as the filter keeps it: the Kalman state and how many
/// rejections it has seen (for sampled rejection events).
public struct FilterRow: Codable, Sendable, Equatable {
    public var state: DeviceFilterState
    public var rejections: Int

    public init(state: DeviceFilterState = DeviceFilterState(), rejections: Int = 0) {
        self.state = state; self.rejections = rejections
    }

    /// A stored row; state an older version wrote restarts the filter but
    /// keeps the odometer and ordering (`restarted` says so).
    public static func restored(from data: Data, using decoder: JSONDecoder) throws -> (row: FilterRow, restarted: Bool) {
        struct Stored: Decodable { var state: JSONValue; var rejections: Int? }
        let stored = try decoder.decode(Stored.self, from: data)
        let (state, restarted) = DeviceFilterState.restored(from: JSONCoding.encode(stored.state), using: decoder)
        return (FilterRow(state: state, rejections: stored.rejections ?? 0), restarted)
    }
}

/// Which rejections become `locationRejected` events.
public enum RejectionEvents: Sendable, Equatable {
    case all
    /// Every n-th rejection of a device (the first, the n+1-th, …).
    case sampled(every: Int)
    case off
}

/// Layer 3: a judged fix in point form, as `getRawPoints` returns it.
public struct JudgedPoint: Codable, Sendable, Equatable {
    public var seq: Int64
    public var sessionID: String?
    public var timeMs: Int64
    public var latitude: Double
    public var longitude: Double
    public var accuracyM: Double
    public var speedMps: Double?
    public var courseDeg: Double?
    public var accepted: Bool
    public var reason: String
}

extension JudgedPoint: JSONWritable {
    public func write(to w: inout JSONWriter) {
        w.beginObject()
        w.field("accepted", accepted)
        w.field("accuracyM", accuracyM)
        w.field("courseDeg", courseDeg)
        w.field("latitude", latitude)
        w.field("longitude", longitude)
        w.field("reason", reason)
        w.field("seq", seq)
        w.field("sessionID", sessionID)
        w.field("speedMps", speedMps)
        w.field("timeMs", timeMs)
        w.endObject()
    }
}

/// Everything the filter decided about one raw fix.
public struct Judgement: Sendable, Equatable {
    public var decision: Decision
    public var judged: JudgedPoint
    /// The accepted point, to store and publish.
    public var point: TrackPoint?
    /// Whether a rejection is announced as an event (see `RejectionEvents`).
    public var announceRejection: Bool
}

extension FilterCore {
    /// Judges one raw fix against the device's row.
    public func handle(_ raw: RawFix, row: inout FilterRow, rejectionEvents: RejectionEvents) -> Judgement {
        let verdict = judge(FilterInput(raw), state: &row.state)
        let judged = JudgedPoint(seq: raw.seq, sessionID: raw.sessionID, timeMs: raw.timeMs, latitude: raw.latitude,
                                 longitude: raw.longitude, accuracyM: raw.accuracyM, speedMps: raw.speedMps,
                                 courseDeg: raw.courseDeg, accepted: verdict.decision.accepted, reason: verdict.decision.reason)
        var announce = false
        if verdict.point == nil {
            switch rejectionEvents {
            case .all: announce = true
            case .off: announce = false
            case .sampled(let every): announce = row.rejections % every == 0
            }
            row.rejections += 1
        }
        return Judgement(decision: verdict.decision, judged: judged, point: verdict.point, announceRejection: announce)
    }
}
