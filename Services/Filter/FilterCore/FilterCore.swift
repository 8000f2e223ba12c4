import Foundation
import Model

/// One device's filter state: everything needed to judge its next fix,
/// persisted with every decision so a restart continues exactly.
public struct DeviceFilterState: Codable, Sendable, Equatable {
    public var frame: LocalFrame?
    public var east: AxisFilter?
    public var north: AxisFilter?
    /// Time of the Kalman state (ms).
    public var filterTimeMs: Int64 = 0
    /// Newest fix time judged (ms), for ordering.
    public var newestMs: Int64?
    /// How long after the fix before it the newest assessed fix came (ms;
    /// a held fix then skipped as a jump leaves it as it was): how often the
    /// device reports, for how long the smoothing lag waits on silence and
    /// whether a fix after a gap waits for the next. Optional so that state
    /// saved before it existed still decodes.
    public var reportIntervalMs: Int64?
    /// When the newest fix reached the gateway (ms), if known: a fix stamped
    /// well after it arrived came from a clock running ahead.
    public var newestReceivedMs: Int64?
    /// The last accepted (emitted) point, in the local frame.
    public var lastAccepted: AcceptedPoint?
    public var odometerM: Double = 0
    /// Motion state from the motion service, if it publishes one.
    public var externalMotion: MotionState?
    /// When the filter itself last saw the device leave a stop (fix time):
    /// a `stationary` from the motion service decided before it is stale.
    public var departedMs: Int64?
    /// Our own stationary detection: where the device is parked, if it is.
    public var stationaryAnchor: Anchor?
    /// Recent outliers, to recover when the filter (not the fixes) is wrong.
    public var outlierRun: [OutlierFix] = []
    /// Consecutive fixes beyond the parked radius.
    public var leavingCount = 0
    /// Recent movement, for stop detection without Doppler speed.
    public var trend = TrendWindows()
    /// The current run of fixes whose Doppler speed says "standing still".
    /// Optional so that state saved before it existed still decodes.
    public var standingRun: StandingRun?
    /// The previous fix's position, to spot a cached fix re-reported.
    public var previousPosition: Position?
    /// A sparse fix held back until the next one tells a jump from a turn.
    public var pending: FilterInput?
    /// Fixes that came after `pending` while it was still undecided (the
    /// look-ahead's second fix). Optional so that state saved before it
    /// existed still decodes.
    public var heldBehind: [FilterInput]?
    /// Fixes without Doppler judged but not yet published: they come out
    /// smoothed, `smoothingLagMs` later (see `Smoothing.swift`). Optional so
    /// that state saved before it existed still decodes.
    public var lagging: [Lagging]?
    /// When the last "still here" point was decided (fix time), which may
    /// be before it is published.
    public var standingMs: Int64?
    /// How much the fixes' errors persist (fixes without Doppler).
    public var noise: NoiseCorrelation?
    /// The way as a steady vehicle would have driven it (see `SteadyTrack`).
    public var steady: SteadyTrack?

    public init() {}

    public struct AcceptedPoint: Codable, Sendable, Equatable {
        public var x: Double, y: Double, timeMs: Int64, accuracyM: Double
        /// The velocity there (east, north; m/s), for the odometer's way to the next point.
        public var ve: Double?, vn: Double?

        public init(x: Double, y: Double, timeMs: Int64, accuracyM: Double, ve: Double? = nil, vn: Double? = nil) {
            (self.x, self.y, self.timeMs, self.accuracyM, self.ve, self.vn) = (x, y, timeMs, accuracyM, ve, vn)
        }
    }
    public struct Anchor: Codable, Sendable, Equatable {
        public var x: Double, y: Double
    }
    public struct OutlierFix: Codable, Sendable, Equatable {
        public var x: Double, y: Double, timeMs: Int64, accuracyM: Double
    }
    public struct Position: Codable, Sendable, Equatable {
        public var latitude: Double, longitude: Double
    }
    public struct StandingRun: Codable, Sendable, Equatable {
        public var count: Int, sinceMs: Int64
    }
}

extension DeviceFilterState {
    /// What survives a state that no longer decodes (saved by an older
    /// version whose filter kept other numbers).
    private struct Carried: Decodable {
        var newestMs: Int64?
        var odometerM: Double?
    }

    /// Restores a saved state. One saved by an older version that no longer
    /// decodes restarts the Kalman filter on the next fix but keeps the
    /// odometer and the ordering, so the device's points stay continuous.
    public static func restored(from data: Data, using decoder: JSONDecoder) -> (state: DeviceFilterState, restarted: Bool) {
        if let state = try? decoder.decode(DeviceFilterState.self, from: data) { return (state, false) }
        var state = DeviceFilterState()
        if let carried = try? decoder.decode(Carried.self, from: data) {
            state.newestMs = carried.newestMs
            state.odometerM = carried.odometerM ?? 0
        }
        return (state, true)
    }
}

/// A fix as the filter sees it (`fix.latitude` reads its `reading`).
@dynamicMemberLookup
public struct FilterInput: Codable, Sendable, Equatable {
    public var seq: Int64
    public var sessionID: String?
    public var timeMs: Int64
    public var reading: Reading
    /// When the fix reached the gateway (ms), if known.
    public var receivedMs: Int64?

    public init(seq: Int64, sessionID: String?, timeMs: Int64, latitude: Double, longitude: Double,
                accuracyM: Double, speedMps: Double? = nil, courseDeg: Double? = nil, receivedMs: Int64? = nil) {
        self.seq = seq; self.sessionID = sessionID; self.timeMs = timeMs
        self.reading = Reading(latitude: latitude, longitude: longitude, accuracyM: accuracyM, speedMps: speedMps, courseDeg: courseDeg)
        self.receivedMs = receivedMs
    }

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
                  receivedMs: raw.receivedMs > 0 ? raw.receivedMs : nil)
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

/// The filter: a Kalman filter and a staged acceptance pipeline. Pure: the
/// only time it knows is the fixes' own.
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
        if motion == .stationary, let departed = state.departedMs, timeMs <= departed { return }
        state.externalMotion = motion
    }

    /// Judges one fix and publishes its point at once (no smoothing lag,
    /// no look-ahead: `submit` has both).
    public func judge(_ fix: FilterInput, state: inout DeviceFilterState) -> Verdict {
        conclude(assess(fix, state: &state), fix: fix, state: &state)
    }

    /// The forward pass: every gate, the Kalman update. A fix the filter
    /// takes comes back with its step, its point not yet placed. `alone`:
    /// a held fix judged without the one after it, because none came.
    func assess(_ fix: FilterInput, state: inout DeviceFilterState, alone: Bool = false) -> Verdict {
        // 1. Validity.
        guard fix.latitude.isFinite, fix.longitude.isFinite, abs(fix.latitude) <= 90, abs(fix.longitude) <= 180,
              !(fix.latitude == 0 && fix.longitude == 0), fix.accuracyM.isFinite, fix.accuracyM >= 0 else {
            return reject(fix, .invalidFix, state: state)
        }
        // 2. Duplicate and 3. ordering / staleness, against the newest judged time.
        if clockRanAhead(fix, state: state) {
            // The newest fix was stamped over a minute after it arrived, and
            // this one, behind it, agrees with its own arrival: the old
            // timeline was a wrong clock, not movement. Start a new one (the
            // odometer stays), or every fix until the clock catches up is stale.
            state.newestMs = nil
            state.east = nil
            state.north = nil
            state.stationaryAnchor = nil
            state.outlierRun.removeAll()
        }
        if let newest = state.newestMs {
            if fix.timeMs == newest { return reject(fix, .duplicate, state: state) }
            if fix.timeMs < newest {
                let behind = Double(newest - fix.timeMs)
                let reason: RejectReason = newest - fix.timeMs > profile.staleAfterMs ? .stale : .outOfOrder
                return reject(fix, reason, state: state, measured: behind / 1000, limit: Double(profile.staleAfterMs) / 1000)
            }
        }
        state.reportIntervalMs = state.newestMs.map { fix.timeMs - $0 }
        state.newestMs = fix.timeMs
        state.newestReceivedMs = fix.receivedMs
        noteDoppler(fix, state: &state)
        // 3b. A position identical to the previous fix's, at a later time, is
        // the receiver re-reporting a cached fix (no signal; phones and
        // network locations do this for minutes while the device moves on).
        // It says nothing about where the device is now.
        let position = DeviceFilterState.Position(latitude: fix.latitude, longitude: fix.longitude)
        defer { state.previousPosition = position }
        if state.previousPosition == position {
            return reject(fix, .repeatedPosition, state: state)
        }
        let accuracy = Accuracy.meters(fix.accuracyM)
        // 4. Accuracy ceiling.
        if accuracy > profile.accuracyCeilingM {
            return reject(fix, .accuracyTooLow, state: state, measured: accuracy, limit: profile.accuracyCeilingM)
        }
        if state.frame == nil || state.east == nil {
            return initialize(fix, accuracy: accuracy, state: &state)
        }
        var frame = state.frame!
        var (x, y) = frame.toLocal(lat: fix.latitude, lon: fix.longitude)
        if hypot(x, y) > 50_000 {
            // Keep the flat frame small: move its origin to the current estimate.
            state = recentred(state, lat: fix.latitude, lon: fix.longitude)
            frame = state.frame!
            (x, y) = frame.toLocal(lat: fix.latitude, lon: fix.longitude)
        }
        let sigma = Accuracy.sigma(accuracy)
        let r = sigma * sigma

        // 5. Implied speed from the last accepted point, allowing for both accuracies.
        if let last = state.lastAccepted {
            let dt = max(1, Double(fix.timeMs - last.timeMs) / 1000)
            let distance = hypot(x - last.x, y - last.y)
            let speed = max(0, distance - accuracy - last.accuracyM) / dt
            if speed > maxSpeed(state) {
                if let recovered = recover(fix, x: x, y: y, accuracy: accuracy, state: &state) { return recovered }
                return reject(fix, .impliedSpeed, state: state, measured: speed, limit: maxSpeed(state))
            }
        }

        // Parked: fixes around the anchor are drift. They keep the filter
        // current but never move the point. Leaving takes two fixes in a row
        // (one, when they come seconds apart) that say so: Doppler speed of a
        // slow walk or more, or a position beyond four times the radius; or,
        // without Doppler, one beyond twice the radius while the trend is
        // confidently moving.
        if let anchor = state.stationaryAnchor {
            let fromAnchor = hypot(x - anchor.x, y - anchor.y)
            let radius = max(profile.stationaryRadiusM, accuracy)
            state.trend.add(x: x, y: y, sigma: sigma, timeMs: fix.timeMs)
            let leaving: Bool
            if let doppler = fix.speedMps {
                leaving = doppler >= Self.walkingDopplerMps || fromAnchor > 4 * radius
            } else {
                // Parked drift wanders tens of metres for minutes; a departure
                // also shows in the fixes' trend as a confident speed.
                leaving = fromAnchor > 2 * radius && state.trend.confidentlyFasterThan(0.5)
            }
            state.leavingCount = leaving ? state.leavingCount + 1 : 0
            // Fixes seconds apart (a phone saving battery) cannot wait for a
            // second witness: by then the device is far down the road. A held
            // fix that no other followed has waited already, and a lone fix
            // away from a stop followed by silence is as often a jump as a departure.
            let needed = fix.timeMs - state.filterTimeMs >= 3_000 && !alone ? 1 : 2
            if state.leavingCount < needed {
                if !leaving || fromAnchor <= 2 * radius { absorbDrift(fix, x: x, y: y, r: r, state: &state) }
                if let standing = standingPoint(fix, state: &state) { return standing }
                return reject(fix, .stationaryDrift, state: state, measured: fromAnchor, limit: radius)
            }
            state.stationaryAnchor = nil
            state.leavingCount = 0
            // The fixes say the device left: a `stationary` from the motion
            // service no longer holds (it only ever sees accepted points, so
            // it cannot learn of the departure until this fix goes out).
            if state.externalMotion == .stationary { state.externalMotion = nil }
            state.departedMs = fix.timeMs
            // The trend windows still hold the stop (the longest, most of a
            // minute of it): asked now, they would park the device again at
            // once. The moving trend starts with the departure.
            state.trend = TrendWindows()
            // From standstill the speed is unknown: let the filter pick it up,
            // from the first fixes of the way out when they still wait.
            if !takeBackTheWayOut(from: anchor, radius: radius, to: (x, y), state: &state), var east = state.east, var north = state.north {
                east.vv = max(east.vv, Self.unknownVelocityVariance)
                north.vv = max(north.vv, Self.unknownVelocityVariance)
                state.east = east
                state.north = north
            }
        }

        // 6. Kalman innovation.
        let dt = Double(fix.timeMs - state.filterTimeMs) / 1000
        // White acceleration noise suits fixes a second apart; over longer
        // gaps real vehicles hold an acceleration (a turn, braking) and the
        // position spreads like dt⁴, not dt³: grow the noise with the gap.
        // Without Doppler nothing else tells the filter of a turn, so it
        // must follow the positions more closely.
        let q = state.externalMotion == .stationary ? profile.stationaryQ : movingQ(dt: dt, doppler: fix.speedMps != nil, noise: state.noise)
        var (east, north, mahalanobis) = predicted(state, dt: dt, q: q, x: x, y: y, r: r)
        let (predictedEast, predictedNorth, priorTimeMs) = (east, north, state.filterTimeMs)
        if mahalanobis > profile.innovationGate {
            if let recovered = recover(fix, x: x, y: y, accuracy: accuracy, state: &state) { return recovered }
            return reject(fix, .innovationOutlier, state: state, measured: mahalanobis, limit: profile.innovationGate)
        }
        noteInnovation(fix, east: east, north: north, x: x, y: y, r: r, dt: dt, state: &state)
        east.update(position: x, r: r)
        north.update(position: y, r: r)
        if let speed = fix.speedMps {
            // Doppler speed is far better than differenced positions. Course
            // is only meaningful when moving; standing still needs none.
            if speed < 0.3 {
                east.update(velocity: 0, r: 0.09)
                north.update(velocity: 0, r: 0.09)
            } else if let course = fix.courseDeg, speed >= 2 {
                let rv = 0.25 + 0.0004 * speed * speed
                let velocity = Geodesy.velocity(speed: speed, courseDeg: course)
                east.update(velocity: velocity.east, r: rv)
                north.update(velocity: velocity.north, r: rv)
            }
        }
        // No device outruns the profile's top speed: a velocity beyond it
        // came from a wrong fix that slipped through after a long silence.
        let speed = hypot(east.velocity, north.velocity)
        if speed > maxSpeed(state) {
            east.velocity *= maxSpeed(state) / speed
            north.velocity *= maxSpeed(state) / speed
        }
        state.east = east
        state.north = north
        state.filterTimeMs = fix.timeMs
        noteSteady(fix, x: x, y: y, r: r, priorTimeMs: priorTimeMs, state: &state)
        state.outlierRun.removeAll()
        state.trend.add(x: x, y: y, sigma: sigma, timeMs: fix.timeMs)

        // 7. Stationary drift suppression.
        updateStationary(&state, fix: fix, x: east.position, y: north.position)
        if state.stationaryAnchor != nil {
            // Just parked: this fix is part of the stop, not a move.
            if let standing = standingPoint(fix, state: &state) { return standing }
            return reject(fix, .stationaryDrift, state: state, measured: 0, limit: profile.stationaryRadiusM)
        }
        if let doppler = fix.speedMps, state.standingRun != nil {
            // Doppler says standing, not yet for long enough to park (a
            // walker's single dip): the point waits, nothing is parked.
            return reject(fix, .stationaryDrift, state: state, measured: doppler, limit: Self.standingDopplerMps)
        }

        // 8. Minimum spacing and the point: `conclude`, or the smoother.
        return taken(fix, step: FilterStep(frame: state.frame!, priorTimeMs: priorTimeMs, timeMs: fix.timeMs,
                                           predictedEast: predictedEast, predictedNorth: predictedNorth, east: east, north: north))
    }

    /// A fix the Kalman filter took, its point not yet placed.
    func taken(_ fix: FilterInput, step: FilterStep) -> Verdict {
        Verdict(decision: Decision(seq: fix.seq, timeMs: fix.timeMs, accepted: true, reason: "accepted",
                                   estimate: Placement(step.east, step.north, frame: step.frame).estimate),
                point: nil, rejection: nil, step: step)
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
        if let last = state.lastAccepted, let frame = state.frame {
            let (x, y) = frame.toLocal(lat: placed.latitude, lon: placed.longitude)
            let spacing = hypot(x - last.x, y - last.y)
            if spacing < minimum {
                return reject(fix, .minSpacing, state: state, measured: spacing, limit: minimum)
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
        guard var point = verdict.point, let frame = state.frame else { return verdict }
        var verdict = verdict
        if verdict.standing, let last = state.lastAccepted {
            (point.latitude, point.longitude) = frame.toGeo(x: last.x, y: last.y)
            point.accuracyM = last.accuracyM
            state.lastAccepted?.timeMs = point.timeMs
        } else {
            let (x, y) = frame.toLocal(lat: point.latitude, lon: point.longitude)
            var here = DeviceFilterState.AcceptedPoint(x: x, y: y, timeMs: point.timeMs, accuracyM: point.accuracyM)
            if let speed = point.speedMps, let course = point.courseDeg {
                (here.ve, here.vn) = Geodesy.velocity(speed: speed, courseDeg: course)
            } else if point.speedMps != nil {
                (here.ve, here.vn) = (0, 0)
            }
            if let last = state.lastAccepted {
                if let (next, nextMs) = ahead {
                    let (nx, ny) = frame.toLocal(lat: next.latitude, lon: next.longitude)
                    here = Odometer.alongTheWay(here, after: last, before: (nx, ny, nextMs))
                }
                state.odometerM += Odometer.distance(from: last, to: here)
            }
            state.lastAccepted = here
        }
        point.odometerM = state.odometerM
        verdict.point = point
        verdict.decision.estimate?.latitude = point.latitude
        verdict.decision.estimate?.longitude = point.longitude
        return verdict
    }

    // MARK: Steps

    private func initialize(_ fix: FilterInput, accuracy: Double, state: inout DeviceFilterState) -> Verdict {
        let frame = state.frame ?? LocalFrame(originLat: fix.latitude, originLon: fix.longitude)
        let (x, y) = frame.toLocal(lat: fix.latitude, lon: fix.longitude)
        let sigma = Accuracy.sigma(accuracy)
        var ve = 0.0, vn = 0.0, velocityVariance = Self.unknownVelocityVariance
        if let speed = fix.speedMps, let course = fix.courseDeg, speed >= 2 {
            (ve, vn) = Geodesy.velocity(speed: speed, courseDeg: course)
            velocityVariance = 4
        }
        state.frame = frame
        state.east = AxisFilter(position: x, velocity: ve, positionVariance: sigma * sigma, velocityVariance: velocityVariance)
        state.north = AxisFilter(position: y, velocity: vn, positionVariance: sigma * sigma, velocityVariance: velocityVariance)
        state.filterTimeMs = fix.timeMs
        state.outlierRun.removeAll()
        state.stationaryAnchor = nil
        state.trend = TrendWindows()
        return accept(fix, state: &state)
    }

    /// Feeds the fix's innovation to the device's noise correlation: only
    /// fixes without Doppler a second or two apart, while moving.
    private func noteInnovation(_ fix: FilterInput, east: AxisFilter, north: AxisFilter, x: Double, y: Double, r: Double,
                                dt: Double, state: inout DeviceFilterState) {
        guard fix.speedMps == nil, dt <= 2, state.externalMotion != .stationary else {
            state.noise?.interrupt()  // a device with Doppler never starts one
            return
        }
        let (ye, se) = east.innovation(x, r: r), (yn, sn) = north.innovation(y, r: r)
        var noise = state.noise ?? NoiseCorrelation()
        noise.add(east: ye / se.squareRoot(), north: yn / sn.squareRoot(), timeMs: fix.timeMs)
        state.noise = noise
    }

    /// The filter moved `dt` ahead under process noise `q`, and the fix's
    /// statistical distance from it.
    func predicted(_ state: DeviceFilterState, dt: Double, q: Double, x: Double, y: Double, r: Double)
        -> (east: AxisFilter, north: AxisFilter, mahalanobis: Double) {
        Self.predicted(state.east!, state.north!, dt: dt, q: q, x: x, y: y, r: r)
    }

    /// Both axes moved `dt` ahead under process noise `q`, and the fix's
    /// statistical distance from them.
    static func predicted(_ east: AxisFilter, _ north: AxisFilter, dt: Double, q: Double, x: Double, y: Double, r: Double)
        -> (east: AxisFilter, north: AxisFilter, mahalanobis: Double) {
        var east = east, north = north
        east.predict(dt: dt, q: q)
        north.predict(dt: dt, q: q)
        let (ye, se) = east.innovation(x, r: r)
        let (yn, sn) = north.innovation(y, r: r)
        return (east, north, (ye * ye / se + yn * yn / sn).squareRoot())
    }

    /// A parked fix updates the (nearly still) filter unless it is an outlier.
    private func absorbDrift(_ fix: FilterInput, x: Double, y: Double, r: Double, state: inout DeviceFilterState) {
        guard var east = state.east, var north = state.north else { return }
        let dt = Double(fix.timeMs - state.filterTimeMs) / 1000
        east.predict(dt: dt, q: profile.stationaryQ)
        north.predict(dt: dt, q: profile.stationaryQ)
        let (ye, se) = east.innovation(x, r: r)
        let (yn, sn) = north.innovation(y, r: r)
        if (ye * ye / se + yn * yn / sn).squareRoot() <= profile.innovationGate * 2 {
            east.update(position: x, r: r)
            north.update(position: y, r: r)
            east.velocity *= 0.5
            north.velocity *= 0.5
        }
        state.east = east
        state.north = north
        state.filterTimeMs = fix.timeMs
        state.outlierRun.removeAll()
    }

    /// When several outliers in a row agree with each other, the filter has
    /// lost the device (a real jump, a long tunnel): restart on them.
    private func recover(_ fix: FilterInput, x: Double, y: Double, accuracy: Double, state: inout DeviceFilterState) -> Verdict? {
        state.outlierRun.append(.init(x: x, y: y, timeMs: fix.timeMs, accuracyM: accuracy))
        if state.outlierRun.count > profile.reinitializeAfter { state.outlierRun.removeFirst() }
        let run = state.outlierRun
        guard run.count >= profile.reinitializeAfter,
              run[run.count - 1].timeMs - run[0].timeMs >= 6_000 else { return nil }
        let consistent = zip(run, run.dropFirst()).allSatisfy { a, b in
            let dt = max(1, Double(b.timeMs - a.timeMs) / 1000)
            return max(0, hypot(b.x - a.x, b.y - a.y) - a.accuracyM - b.accuracyM) / dt <= maxSpeed(state)
        }
        guard consistent else { return nil }
        state.east = nil
        state.north = nil
        return initialize(fix, accuracy: accuracy, state: &state)
    }

    private func updateStationary(_ state: inout DeviceFilterState, fix: FilterInput, x: Double, y: Double) {
        // Told `stationary`, park at once. Told `moving` or `stopPending`,
        // park by the fixes as always: the motion service sees the stop
        // through the standing points (`standingPoint`), not through drift.
        if state.externalMotion == .stationary {
            if state.stationaryAnchor == nil { state.stationaryAnchor = anchorPoint(state, x: x, y: y) }
            return
        }
        guard state.stationaryAnchor == nil else { return }
        // Doppler speed, when the fix has it, is the better witness of standing
        // still, once it has said so for two fixes and two seconds: a walker's
        // Doppler dips below 0.5 m/s for single fixes. Without it, the fixes'
        // own trend must be confidently slow: under 1 m/s even after adding
        // its uncertainty, and the fix not far from the one before.
        let slow: Bool
        if fix.speedMps != nil {
            slow = state.standingRun.map { $0.count >= 2 && fix.timeMs - $0.sinceMs >= 2_000 } ?? false
        } else {
            slow = state.trend.confidentlySlowerThan(1.0) && !farFromThePrevious(fix, state: state)
        }
        if slow { state.stationaryAnchor = anchorPoint(state, x: x, y: y) }
    }

    /// Whether the fix is farther from the fix before it than a parked
    /// device's drift takes it (twice the parked radius). The trend is a
    /// straight line: a car circling a car park, fixes 15 s and 60 m apart,
    /// fits one that goes nowhere, and was parked there fix after fix (forty
    /// seeds every 15 s without Doppler: odometer −3.3 → −2.0 %, good phone
    /// −5.4 → −4.0; every 10 s −1.6 → −0.9; a second apart, within 0.1 %).
    private func farFromThePrevious(_ fix: FilterInput, state: DeviceFilterState) -> Bool {
        guard let previous = state.previousPosition else { return false }
        let step = Geodesy.distance(previous.latitude, previous.longitude, fix.latitude, fix.longitude)
        return step > 2 * max(profile.stationaryRadiusM, Accuracy.meters(fix.accuracyM))
    }

    private func clockRanAhead(_ fix: FilterInput, state: DeviceFilterState) -> Bool {
        guard let newest = state.newestMs, fix.timeMs < newest, let newestReceived = state.newestReceivedMs,
              let received = fix.receivedMs else { return false }
        return newest - newestReceived > Self.clockToleranceMs && abs(fix.timeMs - received) <= Self.clockToleranceMs
    }

    /// Extends or ends the run of fixes whose Doppler says "standing".
    private func noteDoppler(_ fix: FilterInput, state: inout DeviceFilterState) {
        guard let speed = fix.speedMps, speed < Self.standingDopplerMps else {
            state.standingRun = nil
            return
        }
        if var run = state.standingRun {
            run.count += 1
            state.standingRun = run
        } else {
            state.standingRun = .init(count: 1, sinceMs: fix.timeMs)
        }
    }

    /// Parks on the last emitted point when it is close, so the stop is one node.
    private func anchorPoint(_ state: DeviceFilterState, x: Double, y: Double) -> DeviceFilterState.Anchor {
        if let last = state.lastAccepted, hypot(last.x - x, last.y - y) < profile.stationaryRadiusM {
            return .init(x: last.x, y: last.y)
        }
        return .init(x: x, y: y)
    }

    private func maxSpeed(_ state: DeviceFilterState) -> Double {
        state.externalMotion == .stationary ? profile.maxSpeedMps / 2 : profile.maxSpeedMps
    }

    /// How often a parked device's position is confirmed while the motion
    /// service has not settled it yet (fix time).
    static let standingConfirmationMs: Int64 = 15_000

    /// Parked, while the motion service still says `moving` or `stopPending`:
    /// it only sees accepted points, and holding every drifting fix back
    /// would leave it no fix to time the stop by. Every 15 s one point
    /// repeats the last one ("still here": same place, odometer unchanged),
    /// as long as the device is parked where that point was; once the
    /// motion service settles, drift is held back entirely again. Without a
    /// motion service nothing changes.
    private func standingPoint(_ fix: FilterInput, state: inout DeviceFilterState) -> Verdict? {
        guard state.externalMotion == .moving || state.externalMotion == .stopPending,
              let anchor = state.stationaryAnchor, let last = state.lastAccepted, let frame = state.frame,
              hypot(anchor.x - last.x, anchor.y - last.y) <= profile.stationaryRadiusM,
              fix.timeMs - max(last.timeMs, state.standingMs ?? .min) >= Self.standingConfirmationMs else { return nil }
        state.standingMs = fix.timeMs
        let (lat, lon) = frame.toGeo(x: last.x, y: last.y)
        let point = TrackPoint(seq: fix.seq, sessionID: fix.sessionID, timeMs: fix.timeMs, latitude: lat, longitude: lon,
                               accuracyM: last.accuracyM, speedMps: 0, odometerM: state.odometerM)
        let estimate = Estimate(latitude: lat, longitude: lon, accuracyM: last.accuracyM, speedMps: 0)
        return Verdict(decision: Decision(seq: fix.seq, timeMs: fix.timeMs, accepted: true, reason: "accepted", estimate: estimate),
                       point: point, rejection: nil, standing: true)
    }

    /// A (re)started filter's first point, published as it is.
    private func accept(_ fix: FilterInput, state: inout DeviceFilterState) -> Verdict {
        accepted(fix, at: Placement(state.east!, state.north!, frame: state.frame!))
    }

    func reject(_ fix: FilterInput, _ reason: RejectReason, state: DeviceFilterState,
                        measured: Double? = nil, limit: Double? = nil) -> Verdict {
        Verdict(decision: Decision(seq: fix.seq, timeMs: fix.timeMs, accepted: false, reason: reason.rawValue,
                                   estimate: estimate(state), measured: measured, limit: limit),
                point: nil, rejection: reason)
    }

    /// The current estimate, for the decision log.
    public func estimate(_ state: DeviceFilterState) -> Estimate? {
        guard let frame = state.frame, let east = state.east, let north = state.north else { return nil }
        return Placement(east, north, frame: frame).estimate
    }

    /// The same state in a frame centred on a new origin.
    private func recentred(_ state: DeviceFilterState, lat: Double, lon: Double) -> DeviceFilterState {
        guard let old = state.frame, let east = state.east, let north = state.north else { return state }
        let new = LocalFrame(originLat: lat, originLon: lon)
        func move(_ x: Double, _ y: Double) -> (Double, Double) {
            let g = old.toGeo(x: x, y: y)
            return new.toLocal(lat: g.lat, lon: g.lon)
        }
        var s = state
        s.frame = new
        let (ex, ny) = move(east.position, north.position)
        s.east?.position = ex
        s.north?.position = ny
        if let a = state.lastAccepted { let (x, y) = move(a.x, a.y); s.lastAccepted?.x = x; s.lastAccepted?.y = y }
        if let a = state.stationaryAnchor { let (x, y) = move(a.x, a.y); s.stationaryAnchor = .init(x: x, y: y) }
        s.trend = TrendWindows()  // positions moved frame; start the trend afresh
        s.outlierRun = state.outlierRun.map { o in let (x, y) = move(o.x, o.y); return .init(x: x, y: y, timeMs: o.timeMs, accuracyM: o.accuracyM) }
        return s
    }
}
