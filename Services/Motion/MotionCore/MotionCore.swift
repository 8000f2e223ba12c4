import FoundationEssentials
import Model

/// How the motion machine decides (the motion service's settings).
public struct MotionRules: Sendable, Equatable {
    /// How long a device must stay within `stationaryRadiusM` to settle.
    public var stopTimeoutMs: Int64 = 5 * 60_000
    /// Within the radius this long, a moving device is `stopPending`.
    public var stopPendingAfterMs: Int64 = 60_000
    public var stationaryRadiusM: Double = 25
    /// A departure must hold this long (seconds of fixes outside the radius) before `moving`.
    public var motionTriggerDelayMs: Int64 = 0
    public var disableStopDetection = false
    public var activityRecognition = true
    public var activityConfidenceMin = 66
    public var snapshotConfidenceMin = 50
    public var stillConfidenceMin = 100

    public init() {}

    /// Refuses rules that contradict themselves, naming the settings.
    public func validated() throws -> MotionRules {
        guard stillConfidenceMin >= activityConfidenceMin else {
            throw MotionRulesError("stillConfidenceMin (\(stillConfidenceMin)) must not be below activityConfidenceMin (\(activityConfidenceMin))")
        }
        return self
    }
}

public struct MotionRulesError: Error, CustomStringConvertible, Sendable {
    public let description: String
    init(_ description: String) { self.description = description }
}

/// Where the device may be standing: the first fix of the current cluster.
public struct Anchor: Codable, Sendable, Equatable {
    public var latitude: Double
    public var longitude: Double
    public var timeMs: Int64
    /// Fixes seen inside the radius, for the stop's centroid.
    public var count: Int
    public var sumLatitude: Double
    public var sumLongitude: Double

    init(_ point: TrackPoint) {
        latitude = point.latitude; longitude = point.longitude; timeMs = point.timeMs
        count = 1; sumLatitude = point.latitude; sumLongitude = point.longitude
    }

    func distance(to point: TrackPoint) -> Double {
        Geodesy.distance(latitude, longitude, point.latitude, point.longitude)
    }

    mutating func add(_ point: TrackPoint) {
        count += 1; sumLatitude += point.latitude; sumLongitude += point.longitude
    }

    var centroid: (latitude: Double, longitude: Double) { (sumLatitude / Double(count), sumLongitude / Double(count)) }
}

/// A device as the motion machine keeps it.
public struct MotionRow: Codable, Sendable, Equatable {
    public var state: MotionState?
    public var anchor: Anchor?
    public var lastPoint: TrackPoint?
    /// A departure being confirmed (motionTriggerDelay), since this fix time.
    public var leavingSinceMs: Int64?
    public var trip: Trip?
    public var stop: Stop?
    public var activity: ActivityReading?

    public init() {}
}

/// What the machine decided, in the order it happened (event time).
public enum MotionEffect: Sendable, Equatable {
    case state(MotionState, timeMs: Int64, point: TrackPoint?)
    case stopEnded(Stop)
    case tripEnded(Trip)
}

/// The motion state machine: the fixes decide; activity readings may only
/// bring forward a transition the fixes already justify, never veto one.
/// Pure: time is the points' own (event time).
public struct MotionCore: Sendable {
    public var rules: MotionRules
    public init(rules: MotionRules) { self.rules = rules }

    public func handle(point: TrackPoint, row: inout MotionRow) -> [MotionEffect] {
        var effects: [MotionEffect] = []
        defer { row.lastPoint = point }
        guard let state = row.state, var anchor = row.anchor else {
            // The first point: standing here until the fixes say otherwise.
            row.state = .stationary
            row.anchor = Anchor(point)
            row.stop = Stop(arrivalMs: point.timeMs, latitude: point.latitude, longitude: point.longitude, sessionID: point.sessionID)
            return [.state(.stationary, timeMs: point.timeMs, point: point)]
        }
        // Outside the radius only when the fix says so beyond its own accuracy.
        let outside = anchor.distance(to: point) - min(point.accuracyM, rules.stationaryRadiusM) > rules.stationaryRadiusM
        switch state {
        case .stationary:
            guard outside else { anchor.add(point); row.anchor = anchor; row.leavingSinceMs = nil; return [] }
            let since = row.leavingSinceMs ?? point.timeMs
            row.leavingSinceMs = since
            guard point.timeMs - since >= rules.motionTriggerDelayMs else { return [] }
            effects += depart(point, row: &row)
        case .moving, .stopPending:
            if outside, let last = row.lastPoint, stoodThroughSilence(since: last, until: point, anchor: anchor) {
                // The filter says little while a device is parked: a long silence
                // inside the radius, left at a walk's pace or slower, was a stop.
                effects += settle(row: &row)
                effects += depart(point, row: &row)
                return effects
            }
            if outside {
                // Still travelling: the cluster starts again here.
                row.anchor = Anchor(point)
                if state == .stopPending { row.state = .moving; effects.append(.state(.moving, timeMs: point.timeMs, point: point)) }
                updateTrip(point, row: &row)
                return effects
            }
            anchor.add(point)
            row.anchor = anchor
            updateTrip(point, row: &row)
            guard !rules.disableStopDetection else { return effects }
            let standing = point.timeMs - anchor.timeMs
            if state == .moving, standing >= min(rules.stopPendingAfterMs, rules.stopTimeoutMs) {
                row.state = .stopPending
                effects.append(.state(.stopPending, timeMs: point.timeMs, point: point))
            }
            if row.state == .stopPending, standing >= rules.stopTimeoutMs {
                effects += settle(row: &row)
            }
        }
        return effects
    }

    /// A silence (the filter says little while a device is parked): settles at
    /// arrival + stop timeout once `nowMs` — the device's time as the clock
    /// carries it on — is that far past arrival, if the device was standing
    /// or slowing to a stop at its last point (a tunnel at speed is not a
    /// stop).
    public func handle(silenceUntil nowMs: Int64, row: inout MotionRow) -> [MotionEffect] {
        guard let state = row.state, state != .stationary, let anchor = row.anchor, let last = row.lastPoint,
              !rules.disableStopDetection, nowMs - anchor.timeMs >= rules.stopTimeoutMs,
              state == .stopPending || (last.speedMps ?? .infinity) < 1 else { return [] }
        return settle(row: &row)
    }

    /// `changePace`: true commits to moving now, false settles as a confirmed stop does.
    public func changePace(isMoving: Bool, atMs nowMs: Int64, row: inout MotionRow) -> [MotionEffect] {
        let point = row.lastPoint
        if isMoving {
            guard row.state != .moving else { return [] }
            row.state = .moving
            if let point { row.anchor = Anchor(point) }
            var effects: [MotionEffect] = [.state(.moving, timeMs: nowMs, point: point)]
            if var stop = row.stop { stop.departureMs = nowMs; effects.append(.stopEnded(stop)); row.stop = nil }
            if let point { row.trip = Trip(startMs: nowMs, startLatitude: point.latitude, startLongitude: point.longitude,
                                           startOdometerM: point.odometerM, sessionID: point.sessionID) }
            return effects
        }
        guard row.state != .stationary else { return [] }
        if row.anchor == nil, let point { row.anchor = Anchor(point) }
        return settle(row: &row, atMs: nowMs)
    }

    /// An activity reading: it may bring forward the stop a standing device's
    /// fixes already show, never start or stop one on its own.
    public func handle(activity: ActivityReading, row: inout MotionRow) -> [MotionEffect] {
        guard rules.activityRecognition else { return [] }
        let bar = activity.snapshot == true ? rules.snapshotConfidenceMin : rules.activityConfidenceMin
        guard activity.confidence >= bar else { return [] }
        row.activity = activity
        // A confident `still` while the fixes already stand inside the radius: pending at once.
        if activity.isStill, activity.confidence >= rules.stillConfidenceMin, row.state == .moving,
           let anchor = row.anchor, let point = row.lastPoint, anchor.count >= 2, point.timeMs > anchor.timeMs {
            row.state = .stopPending
            return [.state(.stopPending, timeMs: point.timeMs, point: point)]
        }
        return []
    }

    /// Whether the device stood still through the silence before `point`:
    /// it was inside the radius at `last`, the stop timeout passed since it
    /// got there, and crossing the gap needed less than half a metre a
    /// second (a tunnel or a walk covers far more).
    private func stoodThroughSilence(since last: TrackPoint, until point: TrackPoint, anchor: Anchor) -> Bool {
        guard !rules.disableStopDetection, point.timeMs - anchor.timeMs >= rules.stopTimeoutMs,
              anchor.distance(to: last) <= rules.stationaryRadiusM + min(last.accuracyM, rules.stationaryRadiusM) else { return false }
        let gapSec = Double(point.timeMs - last.timeMs) / 1000
        guard gapSec > 0 else { return false }
        return Geodesy.distance(last.latitude, last.longitude, point.latitude, point.longitude) / gapSec < 0.5
    }

    private func depart(_ point: TrackPoint, row: inout MotionRow) -> [MotionEffect] {
        var effects: [MotionEffect] = [.state(.moving, timeMs: point.timeMs, point: point)]
        // The stop ends where the last fix inside it was.
        let departure = row.lastPoint.map { max($0.timeMs, row.stop?.arrivalMs ?? $0.timeMs) } ?? point.timeMs
        if var stop = row.stop {
            stop.departureMs = departure
            effects.append(.stopEnded(stop))
        }
        row.stop = nil
        row.state = .moving
        row.leavingSinceMs = nil
        row.anchor = Anchor(point)
        let from = row.lastPoint ?? point
        row.trip = Trip(startMs: departure, startLatitude: from.latitude, startLongitude: from.longitude,
                        startOdometerM: from.odometerM, sessionID: point.sessionID)
        updateTrip(point, row: &row)
        return effects
    }

    private func settle(row: inout MotionRow, atMs: Int64? = nil) -> [MotionEffect] {
        guard let anchor = row.anchor else { return [] }
        // In event time: the device stood from the cluster's first fix; it counts as settled a stop timeout later.
        let settledMs = atMs ?? (anchor.timeMs + rules.stopTimeoutMs)
        let centroid = anchor.centroid
        var effects: [MotionEffect] = [.state(.stationary, timeMs: settledMs, point: row.lastPoint)]
        if var trip = row.trip {
            trip.endMs = anchor.timeMs
            trip.endLatitude = anchor.latitude
            trip.endLongitude = anchor.longitude
            effects.append(.tripEnded(trip))
        }
        row.trip = nil
        row.stop = Stop(arrivalMs: atMs ?? anchor.timeMs, latitude: centroid.latitude, longitude: centroid.longitude,
                        sessionID: row.lastPoint?.sessionID)
        row.state = .stationary
        row.leavingSinceMs = nil
        return effects
    }

    private func updateTrip(_ point: TrackPoint, row: inout MotionRow) {
        guard var trip = row.trip else { return }
        trip.distanceM = max(0, point.odometerM - trip.startOdometerM)
        trip.maxSpeedMps = max(trip.maxSpeedMps, point.speedMps ?? 0)
        row.trip = trip
    }
}
