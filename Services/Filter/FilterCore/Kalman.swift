import Foundation
import Model

/// The Kalman filter's steps: starting it, the prediction the innovation
/// gate weighs, the update, and restarting it when the fixes agree it is wrong.
extension FilterCore {
    /// Starts the filter on the fix: at its position (in the frame the
    /// published points are in, if any), with Doppler's velocity when it
    /// says the device moves, otherwise an unknown one.
    func startFilter(_ fix: FilterInput, _ judging: Judging, state: inout DeviceFilterState) -> Placement {
        let frame = state.kalman.frame ?? LocalFrame(originLat: fix.latitude, originLon: fix.longitude)
        let (x, y) = frame.toLocal(lat: fix.latitude, lon: fix.longitude)
        let sigma = judging.sigma
        var ve = 0.0, vn = 0.0, velocityVariance = Self.unknownVelocityVariance
        if let speed = fix.speedMps, let course = fix.courseDeg, speed >= 2 {
            (ve, vn) = Geodesy.velocity(speed: speed, courseDeg: course)
            velocityVariance = 4
        }
        let track = KalmanState.Track(
            frame: frame,
            east: AxisFilter(position: x, velocity: ve, positionVariance: sigma * sigma, velocityVariance: velocityVariance),
            north: AxisFilter(position: y, velocity: vn, positionVariance: sigma * sigma, velocityVariance: velocityVariance),
            timeMs: fix.timeMs)
        state.kalman.phase = .tracking(filter: track)
        state.kalman.outliers.removeAll()
        state.stop.anchor = nil
        state.stop.trend = TrendWindows()
        return Placement(track.east, track.north, frame: track.frame)
    }

    /// When several outliers in a row agree with each other, the filter has
    /// lost the device (a real jump, a long tunnel): restart on them. Nil
    /// (the fix noted among the outliers) while they do not. With Doppler
    /// the filter rides out a multipath burst on its velocities (see
    /// `deadReckon`), so the fixes must disagree with it for longer than a
    /// burst lasts before it counts itself lost.
    func recover(_ fix: FilterInput, _ judging: Judging, x: Double, y: Double, state: inout DeviceFilterState) -> Placement? {
        state.kalman.outliers.append(.init(x: x, y: y, timeMs: fix.timeMs, accuracyM: judging.accuracy))
        let doppler = fix.speedMps != nil
        if state.kalman.outliers.count > (doppler ? Self.dopplerRecoveryFixes : profile.reinitializeAfter) {
            state.kalman.outliers.removeFirst()
        }
        let run = state.kalman.outliers
        guard run.count >= profile.reinitializeAfter,
              run[run.count - 1].timeMs - run[0].timeMs >= (doppler ? Self.dopplerRecoveryMs : Self.recoveryMs) else { return nil }
        let consistent = zip(run, run.dropFirst()).allSatisfy { a, b in
            let dt = max(1, Double(b.timeMs - a.timeMs) / 1000)
            return max(0, hypot(b.x - a.x, b.y - a.y) - a.accuracyM - b.accuracyM) / dt <= maxSpeed(state)
        }
        guard consistent else { return nil }
        return startFilter(fix, judging, state: &state)
    }

    /// How long outliers in a row must agree before the filter restarts on
    /// them; with Doppler, longer than a phone's multipath burst (seconds;
    /// 3–8 s in the sweep's phone), and how many such outliers are kept.
    static let recoveryMs: Int64 = 6_000
    static let dopplerRecoveryMs: Int64 = 10_000
    static let dopplerRecoveryFixes = 16

    /// A fix far off the prediction that the filter will not take: a
    /// multipath reflection moves a fix's position, not its Doppler. So the
    /// filter moves on to the fix's time on the fix's velocity alone (dead
    /// reckoning), and the next fix is weighed against where the device went,
    /// not against a prediction that widens with every second since the
    /// last fix taken (which, by a burst's fifth second, took the reflection
    /// itself). Only fixes seconds apart, and only those well beyond the gate:
    /// one just outside it is as often the filter's own error, which dead
    /// reckoning would keep (a good phone, accuracy 3–6 m, lost a minute of
    /// honest fixes that way). A hundred seeds of the sweep's phone at 1 Hz:
    /// jumps through 57 → 27, clean fixes rejected 495 → 460, RMSE 0.58 → 0.55.
    func deadReckon(_ fix: FilterInput, _ prediction: Prediction, mahalanobis: Double, track: KalmanState.Track,
                    state: inout DeviceFilterState) {
        guard prediction.dt <= Self.deadReckoningMaxGapSec, mahalanobis > Self.deadReckoningGateFactor * profile.innovationGate,
              let speed = fix.speedMps, speed < 0.3 || (speed >= 2 && fix.courseDeg != nil) else { return }
        var track = track
        if speed < 0.3 {
            // Standing at the fix: it stood since, where the filter had it
            // (not carried on by the speed before it braked).
            Self.updateDoppler(fix, &track.east, &track.north)
            track.east.predict(dt: prediction.dt, q: prediction.q)
            track.north.predict(dt: prediction.dt, q: prediction.q)
        } else {
            (track.east, track.north) = (prediction.east, prediction.north)
            Self.updateDoppler(fix, &track.east, &track.north)
        }
        track.timeMs = fix.timeMs
        state.kalman.phase = .tracking(filter: track)
    }
    /// Dead reckoning's reach: fixes this close to the filter's last step
    /// (below the look-ahead's 4 s, where the next fix judges a sparse one).
    static let deadReckoningMaxGapSec = 3.5
    /// How far beyond the innovation gate a fix must be for dead reckoning
    /// (2× let 34 jumps through where 1.5× let 27, with as many clean fixes rejected).
    static let deadReckoningGateFactor = 1.5

    /// The filter moved to the fix's time, and the fix's statistical distance from it.
    struct Prediction {
        var east: AxisFilter, north: AxisFilter
        var mahalanobis: Double
        /// Seconds since the filter's last update, and the process noise over them.
        var dt: Double, q: Double
    }

    /// Where `track` puts the device at the fix's time. White acceleration
    /// noise suits fixes a second apart; over longer gaps real vehicles hold
    /// an acceleration (a turn, braking) and the position spreads like dt⁴,
    /// not dt³: the noise grows with the gap. Without Doppler nothing else
    /// tells the filter of a turn, so it must follow the positions more closely.
    @inline(__always)
    func prediction(_ fix: FilterInput, _ judging: Judging, _ track: KalmanState.Track, x: Double, y: Double, state: DeviceFilterState) -> Prediction {
        let sigma = judging.sigma
        let dt = Double(fix.timeMs - track.timeMs) / 1000
        let q = state.stop.externalMotion == .stationary
            ? profile.stationaryQ : movingQ(dt: dt, doppler: fix.speedMps != nil, noise: state.kalman.noise)
        let (east, north, mahalanobis) = Self.predicted(track.east, track.north, dt: dt, q: q, x: x, y: y, r: sigma * sigma)
        return Prediction(east: east, north: north, mahalanobis: mahalanobis, dt: dt, q: q)
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

    /// The Kalman update with a fix every gate passed, from the innovation
    /// gate's prediction, and its step (nil when no filter runs, which only
    /// `start` finds, and it starts one).
    @inline(__always)
    func update(_ fix: FilterInput, _ judging: Judging, state: inout DeviceFilterState) -> FilterStep? {
        guard var track = state.kalman.track, let prediction = judging.prediction else { return nil }
        let sigma = judging.sigma, r = sigma * sigma
        let (x, y) = fix.local(track.frame)
        var (east, north) = (prediction.east, prediction.north)
        let priorTimeMs = track.timeMs
        noteInnovation(fix, east: east, north: north, x: x, y: y, r: r, dt: prediction.dt, state: &state)
        east.update(position: x, r: r)
        north.update(position: y, r: r)
        Self.updateDoppler(fix, &east, &north)
        // No device outruns the profile's top speed: a velocity beyond it
        // came from a wrong fix that slipped through after a long silence.
        let speed = hypot(east.velocity, north.velocity)
        if speed > maxSpeed(state) {
            east.velocity *= maxSpeed(state) / speed
            north.velocity *= maxSpeed(state) / speed
        }
        (track.east, track.north, track.timeMs) = (east, north, fix.timeMs)
        state.kalman.phase = .tracking(filter: track)
        noteSteady(fix, x: x, y: y, r: r, priorTimeMs: priorTimeMs, state: &state)
        state.kalman.outliers.removeAll()
        state.stop.trend.add(x: x, y: y, sigma: sigma, timeMs: fix.timeMs)
        return FilterStep(frame: track.frame, priorTimeMs: priorTimeMs, timeMs: fix.timeMs,
                          predictedEast: prediction.east, predictedNorth: prediction.north, east: east, north: north)
    }

    /// The fix's Doppler velocity into the axes, when it has one. Doppler
    /// speed is far better than differenced positions. Course is only
    /// meaningful when moving; standing still needs none.
    @inline(__always)
    static func updateDoppler(_ fix: FilterInput, _ east: inout AxisFilter, _ north: inout AxisFilter) {
        guard let speed = fix.speedMps else { return }
        if speed < 0.3 {
            east.update(velocity: 0, r: 0.09)
            north.update(velocity: 0, r: 0.09)
        } else if let course = fix.courseDeg, speed >= 2 {
            let rv = dopplerVelocityVariance(speed: speed)
            let velocity = Geodesy.velocity(speed: speed, courseDeg: course)
            east.update(velocity: velocity.east, r: rv)
            north.update(velocity: velocity.north, r: rv)
        }
    }

    /// Per axis (m²/s²): the speed's own error (~0.5 m/s), and the course's,
    /// which moves the velocity across the way by speed × error (the per-axis
    /// filter puts it on both axes). Fast, it dominates: at 30 m/s 3° is
    /// 1.6 m/s. 3° is a choice between what phones report at speed and the
    /// sweep's seeded 5° (docs/filter-design.md has the figures).
    static func dopplerVelocityVariance(speed: Double) -> Double {
        let across = speed * Self.dopplerCourseSigmaRad
        return 0.25 + across * across
    }
    static let dopplerCourseSigmaRad = 3 * Double.pi / 180

    /// Feeds the fix's innovation to the device's noise correlation: only
    /// fixes without Doppler a second or two apart, while moving.
    private func noteInnovation(_ fix: FilterInput, east: AxisFilter, north: AxisFilter, x: Double, y: Double, r: Double,
                                dt: Double, state: inout DeviceFilterState) {
        guard fix.speedMps == nil, dt <= 2, state.stop.externalMotion != .stationary else {
            state.kalman.noise?.interrupt()  // a device with Doppler never starts one
            return
        }
        let (ye, se) = east.innovation(x, r: r), (yn, sn) = north.innovation(y, r: r)
        var noise = state.kalman.noise ?? NoiseCorrelation()
        noise.add(east: ye / se.squareRoot(), north: yn / sn.squareRoot(), timeMs: fix.timeMs)
        state.kalman.noise = noise
    }

    /// A parked fix updates the (nearly still) filter unless it is an outlier.
    func absorbDrift(_ fix: FilterInput, _ judging: Judging, x: Double, y: Double, state: inout DeviceFilterState) {
        guard var track = state.kalman.track else { return }
        let sigma = judging.sigma, r = sigma * sigma
        var east = track.east, north = track.north
        let dt = Double(fix.timeMs - track.timeMs) / 1000
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
        (track.east, track.north, track.timeMs) = (east, north, fix.timeMs)
        state.kalman.phase = .tracking(filter: track)
        state.kalman.outliers.removeAll()
    }

    /// The fastest the device may go: half the profile's while the motion service says it is parked.
    func maxSpeed(_ state: DeviceFilterState) -> Double {
        state.stop.externalMotion == .stationary ? profile.maxSpeedMps / 2 : profile.maxSpeedMps
    }

    /// The same state in a frame centred on a new origin.
    func recentre(_ state: inout DeviceFilterState, lat: Double, lon: Double) {
        guard var track = state.kalman.track else { return }
        let old = track.frame, new = LocalFrame(originLat: lat, originLon: lon)
        func move(_ x: Double, _ y: Double) -> (Double, Double) {
            let g = old.toGeo(x: x, y: y)
            return new.toLocal(lat: g.lat, lon: g.lon)
        }
        track.frame = new
        (track.east.position, track.north.position) = move(track.east.position, track.north.position)
        state.kalman.phase = .tracking(filter: track)
        if var a = state.odometer.lastPoint { (a.x, a.y) = move(a.x, a.y); state.odometer.lastPoint = a }
        if let a = state.stop.anchor { let (x, y) = move(a.x, a.y); state.stop.anchor = .init(x: x, y: y) }
        state.stop.trend = TrendWindows()  // positions moved frame; start the trend afresh
        state.kalman.outliers = state.kalman.outliers.map { o in
            let (x, y) = move(o.x, o.y)
            return .init(x: x, y: y, timeMs: o.timeMs, accuracyM: o.accuracyM)
        }
    }
}
