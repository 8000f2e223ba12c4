import Foundation
import Model

/// A verdict with the fix it judges (with look-ahead it may be an earlier one).
public struct Judged: Sendable, Equatable {
    public var fix: FilterInput
    public var verdict: Verdict
}

/// One fix of look-ahead for sparse fixes. Ten seconds apart, a multipath
/// jump of a few hundred metres and a turn look alike to a filter that only
/// knows the past: both land far off the prediction, within what a vehicle
/// could have done since. The next fix tells them apart: knowing where the
/// device was before and after, a smoother says where it must have been in
/// between, within tens of metres even through a turn. So a sparse fix is
/// held until the next fix (or `flush`, after the profile's `lookAheadMs`),
/// then judged with it: its point and event come one fix interval late,
/// still stamped with its own time. Fixes seconds apart (where the
/// innovation gate already tells) are judged at once.
extension FilterCore {
    /// Fixes closer together than this are judged at once: a second or two
    /// apart the innovation gate tells. Every 5 s without Doppler it does not
    /// (jumps of 80–150 m fit a 5 s prediction), and the bridge does.
    static let lookAheadMinGapMs: Int64 = 4_000
    /// How often a sparse fix is a multipath jump, before looking at it.
    static let jumpPrior = 0.03
    /// How far from the truth a jump may land (m).
    static let jumpRadiusM = 400.0
    /// The next fix within this many standard deviations of the old track is "back on it".
    static let backOnTrackSigma = 3.0
    /// The stories are told with a steady vehicle's process noise, this many
    /// times the profile's, not grown with the gap as the filter's own is
    /// (grown, it makes any landing point within hundreds of metres plausible;
    /// 1× and 2× rejected more fixes in turns and caught no more jumps).
    static let storyQFactor = 3.0

    /// Judges `fix`; returns the verdicts now due, in fix order: none (the fix
    /// is held), one, or two (a held fix and this one).
    public func submit(_ fix: FilterInput, state: inout DeviceFilterState) -> [Judged] {
        var assessed: [(FilterInput, Verdict)] = []
        if let held = state.pending {
            state.pending = nil
            assessed.append((held, resolve(held, next: fix, state: &state)))
        }
        if profile.lookAhead, waitsForNext(fix, state: state) {
            state.pending = fix
        } else {
            assessed.append((fix, assess(fix, state: &state)))
        }
        return publish(assessed, state: &state)
    }

    /// Everything still waiting when no next fix is coming (silence, a
    /// session's end): the held fix judged alone, the smoothing lag emptied.
    public func flush(state: inout DeviceFilterState) -> [Judged] {
        var due: [Judged] = []
        if let held = state.pending {
            state.pending = nil
            due = publish([(held, assess(held, state: &state, alone: true))], state: &state)
        }
        return due + releaseLagging(before: .max, state: &state)
    }

    /// Whether anything waits for a later fix (held, or in the smoothing lag).
    public func waits(_ state: DeviceFilterState) -> Bool {
        state.pending != nil || !(state.lagging ?? []).isEmpty
    }

    /// When what waits is published if no fix comes (wall clock, ms), given
    /// when the newest fix arrived; nil when nothing waits. A held fix
    /// waits the look-ahead, the smoothing lag its own length.
    public func dueMs(silentSince arrivedMs: Int64, state: DeviceFilterState) -> Int64? {
        if state.pending != nil { return arrivedMs + profile.lookAheadMs }
        if !(state.lagging ?? []).isEmpty { return arrivedMs + profile.smoothingLagMs }
        return nil
    }

    /// A sparse fix the filter would accept, whose next fix is due within the
    /// look-ahead (a device that reports less often gains nothing by waiting).
    private func waitsForNext(_ fix: FilterInput, state: DeviceFilterState) -> Bool {
        // Sparse: far from the filter's last update. Worth waiting: the device
        // reports at least every `lookAheadMs`, so the next fix is due in time.
        let gap = fix.timeMs - state.filterTimeMs, interval = fix.timeMs - (state.newestMs ?? state.filterTimeMs)
        // Parked too: a sparse fix far from the stop departs at once, so a
        // jump there would be a departure unless the next fix says otherwise.
        guard state.east != nil, state.externalMotion != .stationary,
              gap >= Self.lookAheadMinGapMs, interval <= profile.lookAheadMs else {
            return false
        }
        var trial = state
        return assess(fix, state: &trial).taken
    }

    /// Judges a held fix knowing the fix after it.
    private func resolve(_ held: FilterInput, next: FilterInput, state: inout DeviceFilterState) -> Verdict {
        var through = state
        let verdict = assess(held, state: &through)
        guard verdict.taken else { state = through; return verdict }
        var without = state
        without.newestMs = held.timeMs
        without.previousPosition = .init(latitude: held.latitude, longitude: held.longitude)
        // Two stories for the held fix. True: it lies where the device was
        // between the state before it and the next fix (the bridge). Jump: it
        // is anywhere a reflection puts it, a disc of `jumpRadiusM`, with a
        // prior of `jumpPrior`. The likelier wins, but only while the next fix
        // is back on the old track: one that surprises both (a sharp turn
        // after the held fix, another jump) tells nothing.
        if let bridge = bridge(held, next: next, state: state), let withoutHeld = fit(next, state: without) {
            let trueStory = log(1 - Self.jumpPrior) + bridge.logLikelihood
            let jumpStory = log(Self.jumpPrior) - log(.pi * Self.jumpRadiusM * Self.jumpRadiusM)
            if withoutHeld.distance <= Self.backOnTrackSigma, jumpStory > trueStory {
                // The decision log's measured/limit: the held fix's distance from the bridge, the next's from the old track.
                state = without
                return reject(held, .isolatedJump, state: state, measured: bridge.distance, limit: withoutHeld.distance)
            }
        }
        state = through
        return verdict
    }

    /// Where the held fix should be, knowing the state before it and the fix
    /// after it (the smoother run back from the next fix, the held one left
    /// out): its distance from there in standard deviations, and its Gaussian
    /// log-likelihood (both axes).
    func bridge(_ held: FilterInput, next: FilterInput, state: DeviceFilterState) -> (distance: Double, logLikelihood: Double)? {
        guard let frame = state.frame, var east = state.east, var north = state.north,
              held.timeMs > state.filterTimeMs, next.timeMs > held.timeMs else { return nil }
        let q = storyQ(held)
        if state.stationaryAnchor != nil {
            // Parked, the held fix would be a departure: the speed since is unknown.
            east.vv = max(east.vv, Self.unknownVelocityVariance)
            north.vv = max(north.vv, Self.unknownVelocityVariance)
        }
        let toHeld = Double(held.timeMs - state.filterTimeMs) / 1000, toNext = Double(next.timeMs - held.timeMs) / 1000
        east.predict(dt: toHeld, q: q)
        north.predict(dt: toHeld, q: q)
        var eastNext = east, northNext = north
        eastNext.predict(dt: toNext, q: q)
        northNext.predict(dt: toNext, q: q)
        let (nx, ny) = frame.toLocal(lat: next.latitude, lon: next.longitude)
        let nextSigma = Accuracy.sigma(next.accuracyM)
        var eastAfter = eastNext, northAfter = northNext
        eastAfter.update(position: nx, r: nextSigma * nextSigma)
        northAfter.update(position: ny, r: nextSigma * nextSigma)
        let eastHeld = Self.smooth(east, predicted: eastNext, smoothedNext: eastAfter, dt: toNext)
        let northHeld = Self.smooth(north, predicted: northNext, smoothedNext: northAfter, dt: toNext)
        return Self.fit(held, to: eastHeld, northHeld, frame: frame)
    }

    /// The fix's fit to the prediction.
    func fit(_ fix: FilterInput, state: DeviceFilterState) -> (distance: Double, logLikelihood: Double)? {
        guard let frame = state.frame, var east = state.east, var north = state.north, fix.timeMs > state.filterTimeMs else { return nil }
        let dt = Double(fix.timeMs - state.filterTimeMs) / 1000
        east.predict(dt: dt, q: storyQ(fix))
        north.predict(dt: dt, q: storyQ(fix))
        return Self.fit(fix, to: east, north, frame: frame)
    }

    /// A fix against where the two axes put it: its distance in standard
    /// deviations and its Gaussian log-likelihood (both axes).
    static func fit(_ fix: FilterInput, to east: AxisFilter, _ north: AxisFilter, frame: LocalFrame)
        -> (distance: Double, logLikelihood: Double) {
        let (x, y) = frame.toLocal(lat: fix.latitude, lon: fix.longitude)
        let sigma = Accuracy.sigma(fix.accuracyM)
        let (ye, se) = east.innovation(x, r: sigma * sigma)
        let (yn, sn) = north.innovation(y, r: sigma * sigma)
        let squared = ye * ye / se + yn * yn / sn
        return (squared.squareRoot(), -squared / 2 - log(2 * Double.pi) - log(se * sn) / 2)
    }

    /// The stories' process noise for `fix` (see `storyQFactor`).
    private func storyQ(_ fix: FilterInput) -> Double {
        profile.movingQ * Self.storyQFactor * (fix.speedMps == nil ? Self.noDopplerQFactor : 1)
    }
}
