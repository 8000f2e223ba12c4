import FoundationEssentials
import Glibc
import Model

/// What a gate says about a fix.
enum GateOutcome {
    /// Nothing against it here: on to the next gate.
    case pass
    /// Refused, with what was measured against which limit (the decision log's).
    case reject(RejectReason, measured: Double? = nil, limit: Double? = nil)
    /// The Kalman filter starts on this fix, which is published as it is: its
    /// first fix, or outliers in a row that agree with each other, so the
    /// filter (not the fixes) had lost the device.
    case restart(Placement)
    /// Parked while the motion service still says moving: a "still here"
    /// point repeats the last one.
    case standing(StandingPlace)
}

/// Where a "still here" point goes: the last published point's place.
struct StandingPlace {
    var latitude: Double, longitude: Double, accuracyM: Double
}

/// What the gates found out about a fix on its way through them.
struct Judging {
    /// A held fix judged without the one after it, because none came.
    let alone: Bool
    /// The accuracy judged with, 0 read as unknown (m): `FilterInput.judgedAccuracyM`.
    let accuracy: Double
    /// The position's standard deviation per axis (m).
    let sigma: Double
    /// The position of the fix before this one: the ordering gate notes this
    /// one's in the state at once, the stop gates still compare with the last.
    var previousPosition: DeviceFilterState.Position?
    /// The filter moved to the fix, as the innovation gate weighed it: what the update starts from.
    var prediction: FilterCore.Prediction?

    @inline(__always)
    init(_ fix: FilterInput, alone: Bool) {
        self.alone = alone
        accuracy = fix.judgedAccuracyM
        sigma = Accuracy.sigma(accuracy)
    }
}

extension FilterInput {
    /// The fix in the filter's frame.
    @inline(__always)
    func local(_ frame: LocalFrame) -> (x: Double, y: Double) { frame.toLocal(lat: reading.latitude, lon: reading.longitude) }
}

/// The gates. Each reads the fix and the state, may note what it saw in
/// its owner's part of the state, and says pass or how the fix ends.
enum Gate {
    case validity, ordering, repeatedPosition, accuracyCeiling, start, impliedSpeed, parked, innovation
    case stopsHere, dopplerStanding
}

extension FilterCore {
    /// The gates, in the order a fix meets them. A gate that has nothing to
    /// measure (no point before, not parked) passes.
    static let gates: [Gate] = [
        .validity,          // invalid_fix
        .ordering,          // duplicate, out_of_order, stale
        .repeatedPosition,  // repeated_position
        .accuracyCeiling,   // accuracy_too_low
        .start,             // not started: restart on this fix
        .impliedSpeed,      // implied_speed, or restart (recovery)
        .parked,            // stationary_drift, standing; or the departure
        .innovation,        // innovation_outlier, or restart (recovery)
    ]
    /// After the Kalman update (`update`): the gates that read what the filter made of the fix.
    static let gatesAfterUpdate: [Gate] = [
        .stopsHere,         // stationary_drift, standing
        .dopplerStanding,   // stationary_drift
    ]

    /// What `gate` says about the fix. Inlined, as are the gates: the walk
    /// costs what one function with every gate in it did.
    @inline(__always)
    func check(_ gate: Gate, _ fix: FilterInput, _ judging: inout Judging, _ state: inout DeviceFilterState) -> GateOutcome {
        switch gate {
        case .validity: validity(fix, &judging, &state)
        case .ordering: ordering(fix, &judging, &state)
        case .repeatedPosition: repeatedPosition(fix, &judging, &state)
        case .accuracyCeiling: accuracyCeiling(fix, &judging, &state)
        case .start: start(fix, &judging, &state)
        case .impliedSpeed: impliedSpeed(fix, &judging, &state)
        case .parked: parked(fix, &judging, &state)
        case .innovation: innovation(fix, &judging, &state)
        case .stopsHere: stopsHere(fix, &judging, &state)
        case .dopplerStanding: dopplerStanding(fix, &judging, &state)
        }
    }

    /// 1. A position that cannot be used: not finite, out of range, the (0, 0) "null island".
    @inline(__always)
    func validity(_ fix: FilterInput, _ judging: inout Judging, _ state: inout DeviceFilterState) -> GateOutcome {
        guard fix.latitude.isFinite, fix.longitude.isFinite, abs(fix.latitude) <= 90, abs(fix.longitude) <= 180,
              !(fix.latitude == 0 && fix.longitude == 0), fix.accuracyM.isFinite, fix.accuracyM >= 0 else {
            return .reject(.invalidFix)
        }
        return .pass
    }

    /// 2. Duplicate, out of order or stale, against the newest judged time.
    /// A fix that passes is the newest: its time, arrival, Doppler and place are noted.
    @inline(__always)
    func ordering(_ fix: FilterInput, _ judging: inout Judging, _ state: inout DeviceFilterState) -> GateOutcome {
        if Self.clockRanAhead(fix, state.ordering) {
            // The newest fix was stamped over a minute after it arrived, and
            // this one, behind it, agrees with its own arrival: the old
            // timeline was a wrong clock, not movement. Start a new one (the
            // odometer stays), or every fix until the clock catches up is stale.
            state.ordering.newestMs = nil
            state.kalman.drop()
            state.stop.anchor = nil
        }
        if let newest = state.ordering.newestMs {
            if fix.timeMs == newest { return .reject(.duplicate) }
            if fix.timeMs < newest {
                let behind = Double(newest - fix.timeMs)
                let reason: RejectReason = newest - fix.timeMs > profile.staleAfterMs ? .stale : .outOfOrder
                return .reject(reason, measured: behind / 1000, limit: Double(profile.staleAfterMs) / 1000)
            }
        }
        state.ordering.reportIntervalMs = state.ordering.newestMs.map { fix.timeMs - $0 }
        state.ordering.newestMs = fix.timeMs
        state.ordering.newestReceivedMs = fix.receivedMs
        Self.noteDoppler(fix, stop: &state.stop)
        judging.previousPosition = state.ordering.previousPosition
        state.ordering.previousPosition = .init(latitude: fix.latitude, longitude: fix.longitude)
        return .pass
    }

    /// Whether the newest fix's clock ran ahead and this one, behind it, is honest.
    static func clockRanAhead(_ fix: FilterInput, _ ordering: OrderingState) -> Bool {
        guard let newest = ordering.newestMs, fix.timeMs < newest, let newestReceived = ordering.newestReceivedMs,
              let received = fix.receivedMs else { return false }
        return newest - newestReceived > clockToleranceMs && abs(fix.timeMs - received) <= clockToleranceMs
    }

    /// 3. A position identical to the previous fix's, at a later time, is
    /// the receiver re-reporting a cached fix (no signal; phones and network
    /// locations do this for minutes while the device moves on). It says
    /// nothing about where the device is now.
    @inline(__always)
    func repeatedPosition(_ fix: FilterInput, _ judging: inout Judging, _ state: inout DeviceFilterState) -> GateOutcome {
        return judging.previousPosition == .init(latitude: fix.latitude, longitude: fix.longitude) ? .reject(.repeatedPosition) : .pass
    }

    /// 4. Accuracy worse than the profile's ceiling.
    @inline(__always)
    func accuracyCeiling(_ fix: FilterInput, _ judging: inout Judging, _ state: inout DeviceFilterState) -> GateOutcome {
        // The device's own figure: the ceiling is a rule on what it reports.
        let accuracy = Accuracy.meters(fix.accuracyM), ceiling = profile.accuracyCeilingM
        return accuracy > ceiling ? .reject(.accuracyTooLow, measured: accuracy, limit: ceiling) : .pass
    }

    /// 5. No filter running: this fix starts one. A running one whose frame
    /// is far from the fix moves its origin there, to keep the flat frame small.
    @inline(__always)
    func start(_ fix: FilterInput, _ judging: inout Judging, _ state: inout DeviceFilterState) -> GateOutcome {
        guard let track = state.kalman.track else { return .restart(startFilter(fix, judging, state: &state)) }
        let (x, y) = fix.local(track.frame)
        if hypot(x, y) > 50_000 { recentre(&state, lat: fix.latitude, lon: fix.longitude) }
        return .pass
    }

    /// 6. Reaching the fix from the last published point needs an
    /// implausible speed, allowing for both accuracies.
    @inline(__always)
    func impliedSpeed(_ fix: FilterInput, _ judging: inout Judging, _ state: inout DeviceFilterState) -> GateOutcome {
        guard let last = state.odometer.lastPoint, let frame = state.kalman.frame else { return .pass }
        let accuracy = judging.accuracy
        let (x, y) = fix.local(frame)
        let speed = Self.impliedSpeed(hypot(x - last.x, y - last.y), accuracies: accuracy, last.accuracyM, elapsedMs: fix.timeMs - last.timeMs)
        guard speed > maxSpeed(state) else { return .pass }
        if let recovered = recover(fix, judging, x: x, y: y, state: &state) { return .restart(recovered) }
        return .reject(.impliedSpeed, measured: speed, limit: maxSpeed(state))
    }

    /// The speed that going `distance` in `elapsedMs` needs once both
    /// accuracies are allowed for, over at least a second: the implied speed
    /// gate's, a recovery's run's, a witness's after a silence.
    static func impliedSpeed(_ distance: Double, accuracies a: Double, _ b: Double, elapsedMs: Int64) -> Double {
        max(0, distance - a - b) / max(1, Double(elapsedMs) / 1000)
    }

    /// 7. Parked: fixes around the anchor are drift. They keep the filter
    /// current but never move the point. Leaving takes two fixes in a row
    /// (one, when they come seconds apart) that say so: Doppler speed of a
    /// slow walk or more, or a position beyond four times the radius; or,
    /// without Doppler, one beyond twice the radius while the trend is
    /// confidently moving, or beyond four times after two minutes of silence.
    @inline(__always)
    func parked(_ fix: FilterInput, _ judging: inout Judging, _ state: inout DeviceFilterState) -> GateOutcome {
        guard let anchor = state.stop.anchor, let track = state.kalman.track else { return .pass }
        let accuracy = judging.accuracy
        let (x, y) = fix.local(track.frame)
        let fromAnchor = hypot(x - anchor.x, y - anchor.y)
        let radius = max(profile.stationaryRadiusM, accuracy)
        state.stop.trend.add(x: x, y: y, sigma: judging.sigma, timeMs: fix.timeMs)
        let leaving: Bool
        if let doppler = fix.speedMps {
            leaving = doppler >= Self.walkingDopplerMps || fromAnchor > 4 * radius
        } else {
            // Parked drift wanders tens of metres for minutes; a departure
            // also shows in the fixes' trend as a confident speed. After a
            // silence the trend has forgotten (a phone that slept while it
            // was driven): a fix far from the stop is the way out.
            let silence = fix.timeMs - track.timeMs >= Self.trendForgetsAfterMs
            leaving = fromAnchor > 2 * radius && state.stop.trend.confidentlyFasterThan(0.5)
                || silence && fromAnchor > 4 * radius
        }
        state.stop.leavingCount = leaving ? state.stop.leavingCount + 1 : 0
        // Fixes seconds apart (a phone saving battery) cannot wait for a
        // second witness: by then the device is far down the road. A held
        // fix that no other followed has waited already, and a lone fix
        // away from a stop followed by silence is as often a jump as a departure.
        let needed = fix.timeMs - track.timeMs >= 3_000 && !judging.alone ? 1 : 2
        if state.stop.leavingCount < needed {
            if !leaving || fromAnchor <= 2 * radius { absorbDrift(fix, judging, x: x, y: y, state: &state) }
            return drift(fix, state: &state, measured: fromAnchor, limit: radius)
        }
        depart(from: anchor, radius: radius, at: fix, x: x, y: y, state: &state)
        return .pass
    }

    /// 8. Too far from the Kalman prediction, given both uncertainties.
    @inline(__always)
    func innovation(_ fix: FilterInput, _ judging: inout Judging, _ state: inout DeviceFilterState) -> GateOutcome {
        guard let track = state.kalman.track else { return .pass }
        let (x, y) = fix.local(track.frame)
        let prediction = prediction(fix, judging, track, x: x, y: y, state: state), mahalanobis = prediction.mahalanobis
        // Fixes a second or two apart while moving tell what an accuracy that says nothing is worth.
        if fix.timeMs - track.timeMs <= NoiseCorrelation.pairingMs, state.stop.anchor == nil, state.stop.externalMotion != .stationary {
            state.kalman.calibration.learn(mahalanobis: mahalanobis, gate: profile.innovationGate, reportedM: fix.accuracyM,
                                           judgedWith: fix.accuracyScale ?? 1)
        }
        guard mahalanobis > profile.innovationGate else {
            judging.prediction = prediction
            return .pass
        }
        if let recovered = recover(fix, judging, x: x, y: y, state: &state) { return .restart(recovered) }
        deadReckon(fix, prediction, state: &state)
        return .reject(.innovationOutlier, measured: mahalanobis, limit: profile.innovationGate)
    }

    /// 9. Stationary drift suppression: the fix, now in the filter, shows the
    /// device parked (see `noteStop`). It is part of the stop, not a move.
    @inline(__always)
    func stopsHere(_ fix: FilterInput, _ judging: inout Judging, _ state: inout DeviceFilterState) -> GateOutcome {
        guard let track = state.kalman.track else { return .pass }
        noteStop(fix, judging, x: track.east.position, y: track.north.position, state: &state)
        guard let anchor = state.stop.anchor else { return .pass }
        // After a silence, parked where no point went out (it reappeared
        // standing somewhere else, or was told `stationary` before it got
        // there): this fix is the stop's point, or the track never reaches
        // the stop. (Seconds after the last fix, a far anchor is a jump the
        // filter followed, and publishing it would be the jump.)
        if let last = state.odometer.lastPoint, (state.ordering.reportIntervalMs ?? 0) >= Self.trendForgetsAfterMs,
           hypot(anchor.x - last.x, anchor.y - last.y) > 4 * max(profile.stationaryRadiusM, judging.accuracy) {
            return .pass
        }
        return drift(fix, state: &state, measured: 0, limit: profile.stationaryRadiusM)
    }

    /// 10. Doppler says standing, not yet for long enough to park (a
    /// walker's single dip): the point waits, nothing is parked. (Parked,
    /// the fix got here only as the stop's point.)
    @inline(__always)
    func dopplerStanding(_ fix: FilterInput, _ judging: inout Judging, _ state: inout DeviceFilterState) -> GateOutcome {
        guard let doppler = fix.speedMps, state.stop.standingRun != nil, state.stop.anchor == nil else { return .pass }
        return .reject(.stationaryDrift, measured: doppler, limit: Self.standingDopplerMps)
    }
}
