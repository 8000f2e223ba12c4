import FoundationEssentials
import Glibc
import Model

/// The stop detector: when the device parks, what it says while parked, and when it leaves.
extension FilterCore {
    /// How often a parked device's position is confirmed while the motion
    /// service has not settled it yet (fix time).
    static let standingConfirmationMs: Int64 = 15_000
    /// A silence after which the trend windows hold nothing of the time
    /// before it (three of the longest window's time constant).
    static let trendForgetsAfterMs: Int64 = 120_000

    /// A parked fix: a "still here" point when one is due, otherwise drift.
    func drift(_ fix: FilterInput, state: inout DeviceFilterState, measured: Double, limit: Double) -> GateOutcome {
        if let standing = standingPoint(fix, state: &state) { return .standing(standing) }
        return .reject(.stationaryDrift, measured: measured, limit: limit)
    }

    /// The fixes say the device left the stop at `anchor`.
    func depart(from anchor: DeviceFilterState.Anchor, radius: Double, at fix: FilterInput, x: Double, y: Double,
                state: inout DeviceFilterState) {
        state.stop.anchor = nil
        state.stop.leavingCount = 0
        // A `stationary` from the motion service no longer holds (it only
        // ever sees accepted points, so it cannot learn of the departure
        // until this fix goes out).
        if state.stop.externalMotion == .stationary { state.stop.externalMotion = nil }
        state.stop.departedMs = fix.timeMs
        // The trend windows still hold the stop (the longest, most of a
        // minute of it): asked now, they would park the device again at
        // once. The moving trend starts with the departure.
        state.stop.trend = TrendWindows()
        // From standstill the speed is unknown: let the filter pick it up,
        // from the first fixes of the way out when they still wait.
        if !takeBackTheWayOut(from: anchor, radius: radius, to: (x, y), state: &state) {
            state.kalman.loosenVelocity(to: Self.unknownVelocityVariance)
        }
    }

    /// Parks the device when the fix (at `x`, `y` in the filter, just
    /// updated with it) shows it standing still.
    func noteStop(_ fix: FilterInput, _ judging: Judging, x: Double, y: Double, state: inout DeviceFilterState) {
        // Told `stationary`, park at once. Told `moving` or `stopPending`,
        // park by the fixes as always: the motion service sees the stop
        // through the standing points (`standingPoint`), not through drift.
        if state.stop.externalMotion == .stationary {
            if state.stop.anchor == nil { state.stop.anchor = anchorPoint(state, x: x, y: y) }
            return
        }
        guard state.stop.anchor == nil else { return }
        // Doppler speed, when the fix has it, is the better witness of standing
        // still, once it has said so for two fixes and two seconds: a walker's
        // Doppler dips below 0.5 m/s for single fixes. Without it, the fixes'
        // own trend must be confidently slow: under 1 m/s even after adding
        // its uncertainty, and the fix not far from the one before.
        let slow: Bool
        if fix.speedMps != nil {
            slow = state.stop.standingRun.map { $0.count >= 2 && fix.timeMs - $0.sinceMs >= 2_000 } ?? false
        } else {
            slow = state.stop.trend.confidentlySlowerThan(1.0) && !farFromThePrevious(fix, judging)
        }
        if slow { state.stop.anchor = anchorPoint(state, x: x, y: y) }
    }

    /// Whether the fix is farther from the fix before it than a parked
    /// device's drift takes it (twice the parked radius). The trend is a
    /// straight line: a car circling a car park, fixes 15 s and 60 m apart,
    /// fits one that goes nowhere, and was parked there fix after fix (forty
    /// seeds every 15 s without Doppler: odometer −3.3 → −2.0 %, good phone
    /// −5.4 → −4.0; every 10 s −1.6 → −0.9; a second apart, within 0.1 %).
    private func farFromThePrevious(_ fix: FilterInput, _ judging: Judging) -> Bool {
        guard let previous = judging.previousPosition else { return false }
        let step = Geodesy.distance(previous.latitude, previous.longitude, fix.latitude, fix.longitude)
        return step > 2 * max(profile.stationaryRadiusM, fix.judgedAccuracyM)
    }

    /// Parks on the last emitted point when it is close, so the stop is one node.
    private func anchorPoint(_ state: DeviceFilterState, x: Double, y: Double) -> DeviceFilterState.Anchor {
        if let last = state.odometer.lastPoint, hypot(last.x - x, last.y - y) < profile.stationaryRadiusM {
            return .init(x: last.x, y: last.y)
        }
        return .init(x: x, y: y)
    }

    /// Parked, while the motion service still says `moving` or `stopPending`:
    /// it only sees accepted points, and holding every drifting fix back
    /// would leave it no fix to time the stop by. Every 15 s one point
    /// repeats the last one ("still here": same place, odometer unchanged),
    /// as long as the device is parked where that point was; once the
    /// motion service settles, drift is held back entirely again. Without a
    /// motion service nothing changes.
    private func standingPoint(_ fix: FilterInput, state: inout DeviceFilterState) -> StandingPlace? {
        guard state.stop.externalMotion == .moving || state.stop.externalMotion == .stopPending,
              let anchor = state.stop.anchor, let last = state.odometer.lastPoint, let frame = state.kalman.frame,
              hypot(anchor.x - last.x, anchor.y - last.y) <= profile.stationaryRadiusM,
              fix.timeMs - max(last.timeMs, state.stop.standingMs ?? .min) >= Self.standingConfirmationMs else { return nil }
        state.stop.standingMs = fix.timeMs
        let (lat, lon) = frame.toGeo(x: last.x, y: last.y)
        return StandingPlace(latitude: lat, longitude: lon, accuracyM: last.accuracyM)
    }

    /// Extends or ends the run of fixes whose Doppler says "standing".
    static func noteDoppler(_ fix: FilterInput, stop: inout StopState) {
        guard let speed = fix.speedMps, speed < standingDopplerMps else {
            stop.standingRun = nil
            return
        }
        if var run = stop.standingRun {
            run.count += 1
            stop.standingRun = run
        } else {
            stop.standingRun = .init(count: 1, sinceMs: fix.timeMs)
        }
    }
}
