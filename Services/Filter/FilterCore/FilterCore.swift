import FoundationEssentials
import Glibc
import Model

/// The filter: a Kalman filter behind an ordered table of gates
/// (`Gates.swift`). Pure: the only time it knows is the fixes' own, and
/// every call returns what it decided and leaves the device's state ready
/// for the next fix.
public struct FilterCore: Sendable {
    public var profile: FilterProfile

    /// Doppler speeds below this say "standing"; a walker's stay above it but for single dips.
    static let standingDopplerMps = 0.5
    /// Doppler speeds from this up say "moving", even at a slow walk.
    static let walkingDopplerMps = 0.7
    /// How far a fix's stamp may differ from its arrival before its clock counts as wrong.
    static let clockToleranceMs: Int64 = 60_000
    /// Process noise for fixes without Doppler, as a multiple of the profile's.
    static let noDopplerQFactor = 1.5
    /// The same for a device whose errors are independent (see `noDopplerQFactor(_:)`).
    static let whiteNoDopplerQFactor = 2.5
    /// Velocity variance per axis when the speed is unknown (m²/s²): a
    /// first fix without Doppler, a departure from standstill; up to ~10 m/s.
    static let unknownVelocityVariance = 25.0

    public init(profile: FilterProfile = .named(.balanced)) { self.profile = profile }

    /// The motion service's state for the device, decided at `timeMs` (fix
    /// time). A `stationary` decided before the filter's own latest departure
    /// is stale: the motion service had not yet seen the point that left.
    public func noteMotion(_ motion: MotionState, timeMs: Int64, state: inout DeviceFilterState) {
        if motion == .stationary, let departed = state.stop.departedMs, timeMs <= departed { return }
        state.stop.externalMotion = motion
    }

    /// Judges one fix and publishes its point at once (no smoothing lag,
    /// no look-ahead: `submit` has both).
    public func judge(_ fix: FilterInput, state: inout DeviceFilterState) -> Verdict {
        let fix = calibrated(fix, state: &state)
        return conclude(assess(fix, state: &state), fix: fix, state: &state)
    }

    /// The fix with what its device's accuracy is worth now: a new fix, as
    /// it comes (`judge`, `submit`), before any verdict on it (`AccuracyCalibration`).
    func calibrated(_ fix: FilterInput, state: inout DeviceFilterState) -> FilterInput {
        // An invalid accuracy is the validity gate's to refuse; it says nothing of the run.
        guard fix.accuracyM.isFinite, fix.accuracyM >= 0 else { return fix }
        state.kalman.calibration.note(reportedM: fix.accuracyM)
        var fix = fix
        let scale = state.kalman.accuracyScale
        fix.accuracyScale = scale == 1 ? nil : scale
        return fix
    }

    /// The forward pass: the fix through every gate in order, then into the
    /// Kalman filter, then the gates that read what the filter made of it. A
    /// fix the filter takes comes back with its step, its point not yet
    /// placed. `alone`: a held fix judged without the one after it, because none came.
    func assess(_ fix: FilterInput, state: inout DeviceFilterState, alone: Bool = false) -> Verdict {
        var judging = Judging(fix, alone: alone)
        for gate in Self.gates {
            if let verdict = verdict(check(gate, fix, &judging, &state), fix, state) { return verdict }
        }
        // Only `start` finds no filter running, and it starts one.
        guard let step = update(fix, judging, state: &state) else { return accepted(fix, at: startFilter(fix, judging, state: &state)) }
        for gate in Self.gatesAfterUpdate {
            if let verdict = verdict(check(gate, fix, &judging, &state), fix, state) { return verdict }
        }
        return taken(fix, step: step)
    }

    /// What a gate's outcome makes of the fix; nil: on to the next gate.
    @inline(__always)
    private func verdict(_ outcome: GateOutcome, _ fix: FilterInput, _ state: DeviceFilterState) -> Verdict? {
        switch outcome {
        case .pass:
            nil
        case let .reject(reason, measured, limit):
            reject(fix, reason, state: state, measured: measured, limit: limit)
        case .restart(let placed):
            accepted(fix, at: placed)
        case .standing(let at):
            standing(fix, at: at, odometerM: state.odometer.meters)
        }
    }

    /// A fix the Kalman filter took, its point not yet placed.
    func taken(_ fix: FilterInput, step: FilterStep) -> Verdict {
        Verdict(decision: Decision(seq: fix.seq, timeMs: fix.timeMs, accepted: true, reason: "accepted",
                                   estimate: Placement(step.east, step.north, frame: step.frame).estimate),
                point: nil, rejection: nil, step: step)
    }

    /// A "still here" point: the last point's place, at this fix's time, the odometer unchanged.
    private func standing(_ fix: FilterInput, at place: StandingPlace, odometerM: Double) -> Verdict {
        let point = TrackPoint(seq: fix.seq, sessionID: fix.sessionID, timeMs: fix.timeMs, latitude: place.latitude,
                               longitude: place.longitude, accuracyM: place.accuracyM, speedMps: 0, odometerM: odometerM)
        let estimate = Estimate(latitude: place.latitude, longitude: place.longitude, accuracyM: place.accuracyM, speedMps: 0)
        return Verdict(decision: Decision(seq: fix.seq, timeMs: fix.timeMs, accepted: true, reason: "accepted", estimate: estimate),
                       point: point, rejection: nil, standing: true)
    }

    func reject(_ fix: FilterInput, _ reason: RejectReason, state: DeviceFilterState,
                measured: Double? = nil, limit: Double? = nil) -> Verdict {
        reject(fix, reason, estimate: estimate(state), measured: measured, limit: limit)
    }

    /// A rejection whose decision carries `estimate` rather than the filter's current one.
    func reject(_ fix: FilterInput, _ reason: RejectReason, estimate: Estimate?, measured: Double?, limit: Double?) -> Verdict {
        Verdict(decision: Decision(seq: fix.seq, timeMs: fix.timeMs, accepted: false, reason: reason.rawValue,
                                   estimate: estimate, measured: measured, limit: limit),
                point: nil, rejection: reason)
    }

    /// The current estimate, for the decision log.
    public func estimate(_ state: DeviceFilterState) -> Estimate? {
        guard let track = state.kalman.track else { return nil }
        return Placement(track.east, track.north, frame: track.frame).estimate
    }

    /// Process noise while moving over `dt` seconds.
    func movingQ(dt: Double, doppler: Bool, noise: NoiseCorrelation? = nil) -> Double {
        profile.movingQ * max(1, dt) * (doppler ? 1 : Self.noDopplerQFactor(noise))
    }

    /// Without Doppler, how much closer than the profile's the filter follows
    /// the positions. Independent errors average out in the smoother, so a
    /// device whose errors are known to be nearly white gets up to
    /// `whiteNoDopplerQFactor`: its turns are rounded less (forty seeds of
    /// white noise at 1 Hz: −3.5 → −2.6 %). Errors that persist would be
    /// followed as movement, so from a correlation of 0.5 up (a phone's) the
    /// factor stays `noDopplerQFactor`, as it does until the correlation is learned.
    static func noDopplerQFactor(_ noise: NoiseCorrelation?) -> Double {
        guard let noise, noise.learned else { return noDopplerQFactor }
        return max(noDopplerQFactor, whiteNoDopplerQFactor - 2 * noise.correlation)
    }

    // MARK: The point

    /// Places and publishes an assessed fix's point at once, from the
    /// forward filter's own estimate.
    func conclude(_ verdict: Verdict, fix: FilterInput, state: inout DeviceFilterState) -> Verdict {
        guard let step = verdict.step else { return published(verdict, state: &state) }
        // A step shorter than the estimate's own uncertainty is mostly noise
        // and would only lengthen the track. Without Doppler the velocity
        // itself is uncertain, so a step must be significant at about 95 %
        // (two standard deviations) to count.
        let sigmas = fix.speedMps == nil ? 2.0 : 1.0
        let placed = Placement(step.east, step.north, frame: step.frame)
        return place(placed, fix: fix, minimum: sigmas * placed.sigma, state: &state)
    }

    /// The point at `placed`, or `min_spacing` when it is closer than
    /// `minimum` (or the profile's) to the last published point. `ahead`:
    /// where the next fix puts the device, when known (see `published`).
    func place(_ placed: Placement, fix: FilterInput, minimum: Double, ahead: (Placement, timeMs: Int64)? = nil,
               state: inout DeviceFilterState) -> Verdict {
        let minimum = max(profile.minSpacingM, minimum)
        if let last = state.odometer.lastPoint, let frame = state.kalman.frame {
            let (x, y) = frame.toLocal(lat: placed.latitude, lon: placed.longitude)
            let spacing = hypot(x - last.x, y - last.y)
            if spacing < minimum {
                // Where the fix was placed, not the filter's newest estimate:
                // a smoothed fix is placed a lag after the filter moved on.
                return reject(fix, .minSpacing, estimate: placed.estimate, measured: spacing, limit: minimum)
            }
        }
        return published(accepted(fix, at: placed), ahead: ahead, state: &state)
    }

    /// The fix accepted at `placed`, its point not yet published.
    func accepted(_ fix: FilterInput, at placed: Placement) -> Verdict {
        let estimate = placed.estimate
        let point = TrackPoint(seq: fix.seq, sessionID: fix.sessionID, timeMs: fix.timeMs, latitude: placed.latitude,
                               longitude: placed.longitude, accuracyM: estimate.accuracyM, speedMps: placed.speed,
                               courseDeg: placed.speed >= 0.5 ? placed.course : nil, odometerM: 0)
        return Verdict(decision: Decision(seq: fix.seq, timeMs: fix.timeMs, accepted: true, reason: "accepted", estimate: estimate),
                       point: point, rejection: nil)
    }

    /// Makes a decided point public: the odometer counts the way from the
    /// last published point (its tangent here bent to the next fix's place
    /// when `ahead` knows it); a "still here" point repeats it.
    func published(_ verdict: Verdict, ahead: (Placement, timeMs: Int64)? = nil, state: inout DeviceFilterState) -> Verdict {
        guard var point = verdict.point, let frame = state.kalman.frame else { return verdict }
        var verdict = verdict
        if verdict.standing, let last = state.odometer.lastPoint {
            (point.latitude, point.longitude) = frame.toGeo(x: last.x, y: last.y)
            point.accuracyM = last.accuracyM
            state.odometer.lastPoint?.timeMs = point.timeMs
        } else {
            let (x, y) = frame.toLocal(lat: point.latitude, lon: point.longitude)
            var here = DeviceFilterState.AcceptedPoint(x: x, y: y, timeMs: point.timeMs, accuracyM: point.accuracyM)
            if let speed = point.speedMps, let course = point.courseDeg {
                (here.ve, here.vn) = Geodesy.velocity(speed: speed, courseDeg: course)
            } else if point.speedMps != nil {
                (here.ve, here.vn) = (0, 0)
            }
            if let last = state.odometer.lastPoint {
                if let (next, nextMs) = ahead {
                    let (nx, ny) = frame.toLocal(lat: next.latitude, lon: next.longitude)
                    here = Odometer.alongTheWay(here, after: last, before: (nx, ny, nextMs))
                }
                state.odometer.meters += Odometer.distance(from: last, to: here, reportIntervalMs: state.ordering.reportIntervalMs)
            }
            state.odometer.lastPoint = here
        }
        point.odometerM = state.odometer.meters
        verdict.point = point
        verdict.decision.estimate?.latitude = point.latitude
        verdict.decision.estimate?.longitude = point.longitude
        return verdict
    }
}
