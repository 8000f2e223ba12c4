import FoundationEssentials
import Glibc
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
        if case .moving(let east, let north, _) = DopplerVelocity(fix) {
            (ve, vn) = (east, north)
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
    /// (the fix noted among the outliers) while they do not. They must agree
    /// for longer than a multipath burst lasts: the run keeps its newest
    /// outliers that span `dopplerRecoveryMs` (at least `reinitializeAfter`,
    /// at most `dopplerRunLimit`), and restarts the filter once they span
    /// that; a run without a Doppler speed in it once its newest span
    /// `recoveryMs`. Fixes the filter took that the run shows were off,
    /// still waiting in the smoothing lag, are taken back
    /// (`takeBackWhatTheRunDenies`).
    func recover(_ fix: FilterInput, _ judging: Judging, x: Double, y: Double, state: inout DeviceFilterState) -> Placement? {
        state.kalman.outliers.append(.init(x: x, y: y, timeMs: fix.timeMs, accuracyM: judging.accuracy, doppler: fix.speedMps != nil))
        state.kalman.outliers.removeFirst(newestStart(state.kalman.outliers[...], spanning: Self.dopplerRecoveryMs, at: fix.timeMs))
        if state.kalman.outliers.count > Self.dopplerRunLimit {
            state.kalman.outliers.removeFirst(state.kalman.outliers.count - Self.dopplerRunLimit)
        }
        var run = state.kalman.outliers[...]
        // A fix with Doppler anywhere in the run: the filter may be riding a burst out on it.
        let windowMs = run.contains(where: \.doppler) ? Self.dopplerRecoveryMs : Self.recoveryMs
        run = run[newestStart(run, spanning: windowMs, at: fix.timeMs)...]
        guard run.count >= profile.reinitializeAfter, run[run.endIndex - 1].timeMs - run[run.startIndex].timeMs >= windowMs,
              agree(run, state) else { return nil }
        takeBackWhatTheRunDenies(run[run.startIndex], state: &state)
        return startFilter(fix, judging, state: &state)
    }

    /// Where a run's newest outliers spanning `windowMs` at `nowMs` begin,
    /// keeping at least `reinitializeAfter` of them.
    func newestStart(_ run: ArraySlice<DeviceFilterState.OutlierFix>, spanning windowMs: Int64, at nowMs: Int64) -> Int {
        var start = run.startIndex
        while run.endIndex - start > profile.reinitializeAfter, run[start + 1].timeMs <= nowMs - windowMs { start += 1 }
        return start
    }

    /// Whether each fix of a run could be reached from the one before.
    func agree(_ run: ArraySlice<DeviceFilterState.OutlierFix>, _ state: DeviceFilterState) -> Bool {
        zip(run, run.dropFirst()).allSatisfy { a, b in
            Self.impliedSpeed(hypot(b.x - a.x, b.y - a.y), accuracies: a.accuracyM, b.accuracyM, elapsedMs: b.timeMs - a.timeMs) <= maxSpeed(state)
        }
    }

    /// How long outliers in a row must agree before the filter restarts on
    /// them. Longer than most of a phone's multipath bursts (seconds; 3–8 s
    /// in the sweep's phone): with a Doppler speed in the run 10 s, as the
    /// filter rides a burst out on its velocities (see `deadReckon`);
    /// without, 7 s, inside the default 10 s smoothing lag, so a reflection
    /// the filter took a few seconds before the run began still waits to be
    /// taken back. An 8 s burst at 1 Hz spans 7 s and can restart the filter
    /// on itself; the filter comes back once the road's fixes have agreed
    /// for 7 s. Before, five outliers over 6 s (which fixes a second apart
    /// never span) left a filter that took a reflection at 1 Hz on it until
    /// its widening prediction took a true fix (40 s on one seed of the
    /// sweep's phone). A hundred seeds at 1 Hz without Doppler: jumps
    /// through 123 → 107 (phone), 59 → 45 (good phone), 146 → 124 (5 %
    /// jumps); clean fixes refused 763 → 431, 537 → 263, 1,350 → 971; the
    /// phone's worst odometer 13.3 → 8.1 %. 6 s and 8 s did less (the good
    /// phone's RMSE 0.947 and 0.948 × the clean noise against 0.922).
    static let recoveryMs: Int64 = 7_000
    static let dopplerRecoveryMs: Int64 = 10_000

    /// The most outliers a run keeps (a bound on the device's row): 10 s of
    /// them from a device reporting up to 12 times a second.
    static let dopplerRunLimit = 128

    /// A fix the filter will not take, far off its prediction: a multipath
    /// reflection moves a fix's position, not its Doppler. So the filter
    /// moves on to the fix's time on the fix's velocity alone (dead
    /// reckoning), and the next fix is weighed against where the device went,
    /// not against a prediction that widens with every second since the
    /// last fix taken (which, by a burst's fifth second, took the reflection
    /// itself, and the road after it for an outlier).
    ///
    /// Only fixes at most `deadReckoningMaxGapMs` apart (from the filter's
    /// last step, or in a run of outliers from the one before), and only
    /// those well beyond the gate: one
    /// just outside it is as often the filter's own error, which dead
    /// reckoning would keep (on one seed a good phone, its fixes there 3–6 m,
    /// lost a minute of honest fixes that way). And only for as long as a
    /// burst lasts: once the fixes have disagreed with it for
    /// `dopplerRecoveryMs`, the prediction widens from there as it always
    /// did. A filter that is itself wrong is locked out until its fixes
    /// agree for a restart (`reinitializeAfter` of them over
    /// `dopplerRecoveryMs`), or the widened prediction takes one: at 1 Hz
    /// 10 s; sparser, an interval or two more than without dead reckoning.
    ///
    /// Not on the fixes the implied-speed gate refuses (a reflection some
    /// 300 m or more off): dead reckoning there cost the default and white
    /// noise 1–2 % of RMSE, where at 1 Hz with Doppler nothing may get worse.
    /// A burst that begins with them is ridden out from its first innovation
    /// outlier: its reach counts from the outlier before, seconds away, where
    /// the filter's last step may be further back (measured from that, the
    /// phone's jumps through were 27 where now they are 11).
    func deadReckon(_ fix: FilterInput, _ prediction: Prediction, state: inout DeviceFilterState) {
        let run = state.kalman.outliers
        guard var track = state.kalman.track, let first = run.first else { return }
        // This fix from the outlier before it, or the first from the filter's last step.
        let gapMs = run.count >= 2 ? fix.timeMs - run[run.count - 2].timeMs : fix.timeMs - track.timeMs
        guard gapMs <= Self.deadReckoningMaxGapMs,
              prediction.mahalanobis > Self.deadReckoningGateFactor * profile.innovationGate,
              fix.timeMs - first.timeMs < Self.dopplerRecoveryMs, run.count < Self.dopplerRunLimit,
              let velocity = DopplerVelocity(fix) else { return }
        switch velocity {
        case .standing:
            // Standing at the fix, it braked since: it stands where the
            // filter had it, not carried on at the speed before.
            track.east.velocity = 0
            track.north.velocity = 0
            track.east.predict(dt: prediction.dt, q: prediction.q)
            track.north.predict(dt: prediction.dt, q: prediction.q)
        case .moving:
            (track.east, track.north) = (prediction.east, prediction.north)
        }
        velocity.update(&track.east, &track.north)
        limitSpeed(&track.east, &track.north, state: state)
        track.timeMs = fix.timeMs
        state.kalman.phase = .tracking(filter: track)
    }

    /// Dead reckoning's reach: a fix at most this long after the outlier
    /// before it (the first of a run, after the filter's last step), which
    /// covers phones saving battery (a fix every 5–15 s, and a lost one
    /// between). Over 15 s a Doppler velocity strays metres, a reflection
    /// hundreds. A run lasts `dopplerRecoveryMs` at most, so every 10–15 s it
    /// is its first fix alone. Three hundred seeds of the sweep with Doppler
    /// every 5 s, against a reach of 3.5 s: jumps through 35 against 39 (a
    /// good phone's 46 against 78), clean fixes rejected 171 against 150
    /// (265 against 288), RMSE 0.470 against 0.483 × the clean noise (0.988
    /// against 1.079). At 1 Hz a parked device's first outlier can be 4–30 s
    /// after the filter's last step too: the phone's clean fixes rejected
    /// 1,243 against 1,263, the good phone's 520 against 540, 5 % jumps'
    /// 1,430 against 1,429.
    static let deadReckoningMaxGapMs: Int64 = 30_000
    /// How far beyond the innovation gate a fix must be for dead reckoning.
    /// A hundred seeds of the sweep's phone at 1 Hz, 1.5×: jumps through
    /// 57 → 11, clean fixes rejected 495 → 410, RMSE 0.58 → 0.55 (2×, before
    /// runs were counted from their previous fix: 34 jumps through where
    /// 1.5× let 27, for as many clean fixes rejected).
    static let deadReckoningGateFactor = 1.5

    /// The filter moved to the fix's time, and the fix's statistical distance from it.
    struct Prediction {
        var east: AxisFilter, north: AxisFilter
        var mahalanobis: Double
        /// Seconds since the filter's last update.
        var dt: Double
        /// The process noise it was moved with (m²/s³).
        var q: Double
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
        DopplerVelocity(fix)?.update(&east, &north)
        limitSpeed(&east, &north, state: state)
        (track.east, track.north, track.timeMs) = (east, north, fix.timeMs)
        state.kalman.phase = .tracking(filter: track)
        noteSteady(fix, x: x, y: y, r: r, priorTimeMs: priorTimeMs, state: &state)
        state.kalman.outliers.removeAll()
        state.stop.trend.add(x: x, y: y, sigma: sigma, timeMs: fix.timeMs)
        return FilterStep(frame: track.frame, priorTimeMs: priorTimeMs, timeMs: fix.timeMs,
                          predictedEast: prediction.east, predictedNorth: prediction.north, east: east, north: north)
    }

    /// No device outruns the profile's top speed: a velocity beyond it
    /// came from a wrong fix that slipped through after a long silence.
    func limitSpeed(_ east: inout AxisFilter, _ north: inout AxisFilter, state: DeviceFilterState) {
        let speed = hypot(east.velocity, north.velocity)
        guard speed > maxSpeed(state) else { return }
        east.velocity *= maxSpeed(state) / speed
        north.velocity *= maxSpeed(state) / speed
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
