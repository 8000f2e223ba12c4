import FoundationEssentials
import Model

/// A device as the filter keeps it: the Kalman state and how many
/// rejections it has seen (for sampled rejection events).
public struct FilterRow: Codable, Sendable, Equatable {
    public var state: DeviceFilterState
    public var rejections: Int
    /// When the device's newest fix reached the service (wall clock, ms):
    /// what waits for later fixes is published once it has been silent long enough.
    public var arrivedMs: Int64?

    public init(state: DeviceFilterState = DeviceFilterState(), rejections: Int = 0) {
        self.state = state; self.rejections = rejections
    }
}

/// Which rejections become `locationRejected` events.
public enum RejectionEvents: Sendable, Equatable {
    case all
    /// Every n-th rejection of a device (the first, the n+1-th, …).
    case sampled(every: Int)
    case off
}

/// Layer 3: a judged fix in point form, as `getRawPoints` returns it: the
/// fix as the filter read it, with its verdict.
public struct JudgedPoint: Encodable, Sendable, Equatable {
    public var fix: FilterInput
    public var accepted: Bool
    public var reason: String

    private enum Key: String, CodingKey {
        case seq, sessionID, timeMs, latitude, longitude, accuracyM, speedMps, courseDeg, accepted, reason
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: Key.self)
        try c.encode(fix.seq, forKey: .seq)
        try c.encodeIfPresent(fix.sessionID, forKey: .sessionID)
        try c.encode(fix.timeMs, forKey: .timeMs)
        try c.encode(fix.latitude, forKey: .latitude)
        try c.encode(fix.longitude, forKey: .longitude)
        try c.encode(fix.accuracyM, forKey: .accuracyM)
        try c.encodeIfPresent(fix.speedMps, forKey: .speedMps)
        try c.encodeIfPresent(fix.courseDeg, forKey: .courseDeg)
        try c.encode(accepted, forKey: .accepted)
        try c.encode(reason, forKey: .reason)
    }
}

extension JudgedPoint: JSONWritable {
    public func write(to w: inout JSONWriter) {
        w.beginObject()
        w.field("accepted", accepted)
        w.field("accuracyM", fix.accuracyM)
        w.field("courseDeg", fix.courseDeg)
        w.field("latitude", fix.latitude)
        w.field("longitude", fix.longitude)
        w.field("reason", reason)
        w.field("seq", fix.seq)
        w.field("sessionID", fix.sessionID)
        w.field("speedMps", fix.speedMps)
        w.field("timeMs", fix.timeMs)
        w.endObject()
    }
}

/// One judged fix as the filter's judgement log keeps it: its decision
/// (what `getDecisions` serves) and its judged point (`getRawPoints`) as the
/// parts `d` and `p` of one body, each written as it is served. One row a
/// fix instead of one in each of two logs; a layer that is off is left out.
public struct LoggedJudgement: Encodable, JSONWritable {
    public static let decisionPart = Part.d.rawValue, pointPart = Part.p.rawValue
    public let judgement: Judgement
    public let decision: Bool, point: Bool

    public init(_ judgement: Judgement, decision: Bool, point: Bool) {
        self.judgement = judgement; self.decision = decision; self.point = point
    }

    public enum Part: String, CodingKey { case d, p }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: Part.self)
        if decision { try c.encode(judgement.decision, forKey: .d) }
        if point { try c.encode(judgement.judged, forKey: .p) }
    }

    public func write(to w: inout JSONWriter) {
        w.beginObject()
        if decision { w.field("d", judgement.decision) }
        if point { w.field("p", judgement.judged) }
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
    /// Judges one raw fix against the device's row: the judgements now due,
    /// in fix order (a sparse fix may be held for the next, see `submit`).
    public func handle(_ raw: RawFix, row: inout FilterRow, rejectionEvents: RejectionEvents) -> [Judgement] {
        submit(FilterInput(raw), state: &row.state).map { judgement($0, row: &row, rejectionEvents: rejectionEvents) }
    }

    /// The judgement of a held fix whose next fix has not come in time.
    public func release(row: inout FilterRow, rejectionEvents: RejectionEvents) -> [Judgement] {
        flush(state: &row.state).map { judgement($0, row: &row, rejectionEvents: rejectionEvents) }
    }

    private func judgement(_ due: Judged, row: inout FilterRow, rejectionEvents: RejectionEvents) -> Judgement {
        let verdict = due.verdict
        let judged = JudgedPoint(fix: due.fix, accepted: verdict.decision.accepted, reason: verdict.decision.reason)
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
