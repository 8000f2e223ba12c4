import FoundationEssentials
import Glibc
import Model

/// A departure without Doppler is seen late: the fixes must leave twice the
/// stop's radius, with a confident trend, before the device counts as gone.
/// By then the first fixes of the way out were taken for the stop's drift,
/// and the line would cut from the stop straight to the departure, across
/// the first turn (−2.7 % of the way every 5 s). Those fixes still wait in
/// the smoothing lag, unpublished: the departure takes them back. The filter
/// is run again from the stop over them (the stop's place, its radius, an
/// unknown speed), and they are published as the way out.
extension FilterCore {
    /// Re-runs the filter from `anchor` over the waiting fixes that had left
    /// the stop's radius just before this departure; false when there are
    /// none or one of them does not fit the way out (then nothing changes).
    func takeBackTheWayOut(from anchor: DeviceFilterState.Anchor, radius: Double, to departure: (x: Double, y: Double),
                           state: inout DeviceFilterState) -> Bool {
        guard let frame = state.kalman.frame else { return false }
        var waiting = state.smoothing.waiting
        // The trailing run of drift verdicts beyond the radius (`measured` is
        // the distance from the stop, `limit` the radius), without Doppler,
        // short of the departing fix: farther out, a fix was drift or wander
        // (taken too, they made phone noise 0.5 % longer on forty seeds).
        let reach = hypot(departure.x - anchor.x, departure.y - anchor.y)
        func shortOfTheDeparture(_ entry: Lagging) -> Bool {
            let (x, y) = frame.toLocal(lat: entry.fix.latitude, lon: entry.fix.longitude)
            return hypot(x - anchor.x, y - anchor.y) < reach
        }
        var start = waiting.count
        while start > 0, Self.leftTheStop(waiting[start - 1]), shortOfTheDeparture(waiting[start - 1]) { start -= 1 }
        guard start < waiting.count else { return false }
        var east = AxisFilter(position: anchor.x, velocity: 0, positionVariance: radius * radius,
                              velocityVariance: Self.unknownVelocityVariance)
        var north = AxisFilter(position: anchor.y, velocity: 0, positionVariance: radius * radius,
                               velocityVariance: Self.unknownVelocityVariance)
        var timeMs = waiting[start].fix.timeMs
        for index in start..<waiting.count {
            let fix = waiting[index].fix
            let (x, y) = frame.toLocal(lat: fix.latitude, lon: fix.longitude)
            let sigma = Accuracy.sigma(fix.judgedAccuracyM)
            let dt = Double(fix.timeMs - timeMs) / 1000
            let (predictedEast, predictedNorth, mahalanobis) = Self.predicted(east, north, dt: dt, q: movingQ(dt: dt, doppler: false, noise: state.kalman.noise),
                                                                             x: x, y: y, r: sigma * sigma)
            guard mahalanobis <= profile.innovationGate else { return false }
            (east, north) = (predictedEast, predictedNorth)
            east.update(position: x, r: sigma * sigma)
            north.update(position: y, r: sigma * sigma)
            waiting[index].verdict = taken(fix, step: FilterStep(frame: frame, priorTimeMs: timeMs, timeMs: fix.timeMs,
                                                                 predictedEast: predictedEast, predictedNorth: predictedNorth,
                                                                 east: east, north: north))
            timeMs = fix.timeMs
        }
        state.smoothing.waiting = waiting
        state.kalman.phase = .tracking(filter: .init(frame: frame, east: east, north: north, timeMs: timeMs))
        return true
    }

    /// A waiting fix without Doppler taken for drift while already outside the stop's radius.
    private static func leftTheStop(_ entry: Lagging) -> Bool {
        guard entry.fix.speedMps == nil, entry.verdict.rejection == .stationaryDrift, !entry.verdict.standing,
              let distance = entry.verdict.decision.measured, let radius = entry.verdict.decision.limit else { return false }
        return distance > radius
    }
}
