import FoundationEssentials
import Glibc
import Model

/// A verdict with the fix it judges (with look-ahead it may be an earlier one).
public struct Judged: Sendable, Equatable {
    public var fix: FilterInput
    public var verdict: Verdict
}

/// Look-ahead for sparse fixes. Ten seconds apart, a multipath jump of a
/// few hundred metres and a turn look alike to a filter that only knows the
/// past: both land far off the prediction, within what a vehicle could have
/// done since. The next fix tells them apart: knowing where the device was
/// before and after, a smoother says where it must have been in between,
/// within tens of metres even through a turn. So a sparse fix is held until
/// the next fix (or `flush`, after the profile's `lookAheadMs`), then judged
/// with it: its point and event come one fix interval late, still stamped
/// with its own time. When the next fix leaves it open (the held fix off
/// the bridge, but the next one off the old track too: a jump at either),
/// the fix after settles it, up to `lookAheadFixes`. Fixes seconds apart
/// (where the innovation gate already tells) are judged at once, but for the
/// first out of a silence (`comesOutOfSilence`) and, without Doppler, one
/// after an outlier (`followsAnOutlier`).
extension FilterCore {
    /// Fixes closer together than this are judged at once (but see
    /// `followsAnOutlier`): a second or two apart the innovation gate tells.
    /// Every 5 s without Doppler it does not (jumps of 80–150 m fit a 5 s
    /// prediction), and the bridge does.
    static let lookAheadMinGapMs: Int64 = 4_000
    /// How often a sparse fix is a multipath jump, before looking at it.
    static let jumpPrior = 0.03
    /// How far from the truth a jump may land (m).
    static let jumpRadiusM = 400.0
    /// A held fix is decided before its last fix of look-ahead once the
    /// stories are this sure either way.
    static let settled = 0.01
    /// How long a held fix after an outlier waits for the old track
    /// to come back (fix time), and for at most how many fixes: multipath
    /// bursts last seconds (a phone's 3–8 s here).
    static let burstWindowMs: Int64 = 8_000
    static let burstFixes = 10
    /// The most fixes a burst's length may count (`fixesInABurst(after:_:)`): 8 s at 5 Hz.
    static let burstFixesAtMost = 42
    /// The next fix within this many standard deviations of the old track is "back on it".
    static let backOnTrackSigma = 3.0
    /// A silence this long (a tunnel), from a device seconds apart: see `comesOutOfSilence`.
    static let silenceMs: Int64 = 10_000
    /// A silence from a sparse device: this many of its intervals (a fix or two lost is none).
    static let sparseSilenceIntervals: Int64 = 3
    /// How many fixes after the first out of a silence must agree with each
    /// other, and not with it, for as long as a burst lasts, to make it a jump.
    static let agreeingAfterSilence = 3
    /// How many fixes that could have followed the first out of a silence take it.
    static let followingAfterSilence = 3
    /// The most fixes after a held one that its stories weigh: they number
    /// 2ⁿ, and a fix queued behind the first out of a silence may have
    /// twenty after it. Three hundred seeds at 1 Hz judge the same with 12
    /// as with all of them; with 10, 34 jumps went through on the phone
    /// against 18.
    static let storyFixes = 12
    /// A fix's log-likelihood in the jump story: a prior of `jumpPrior`, anywhere within `jumpRadiusM`.
    static var jumpStory: Double { log(jumpPrior) - log(.pi * jumpRadiusM * jumpRadiusM) }
    /// The stories are told with a steady vehicle's process noise, this many
    /// times the profile's, not grown with the gap as the filter's own is
    /// (grown, it makes any landing point within hundreds of metres plausible;
    /// 1× and 2× rejected more fixes in turns and caught no more jumps).
    static let storyQFactor = 3.0

    /// Judges `fix`; returns the verdicts now due, in fix order: none (the fix
    /// is held), one, or more (held fixes and this one).
    public func submit(_ fix: FilterInput, state: inout DeviceFilterState) -> [Judged] {
        let fix = calibrated(fix, state: &state)
        var held = state.lookAhead.held
        guard !held.isEmpty else {
            if profile.lookAhead, waitsForNext(fix, state: state) {
                state.lookAhead.held = [fix]
                return []
            }
            return publish([(fix, assess(fix, state: &state))], state: &state)
        }
        // The oldest held fixes whose story is now told are judged; the new
        // fix waits behind any that is not.
        held.append(fix)
        var assessed: [(FilterInput, Verdict)] = []
        while held.count > 1 {
            guard let verdict = judgeHeld(held[0], later: Array(held.dropFirst()), silent: false, queued: !assessed.isEmpty, state: &state) else { break }
            assessed.append((held.removeFirst(), verdict))
        }
        if held.count == 1 {
            held = []
            if profile.lookAhead, waitsForNext(fix, state: state) {
                held = [fix]
            } else {
                assessed.append((fix, assess(fix, state: &state)))
            }
        }
        state.lookAhead.held = held
        return publish(assessed, state: &state)
    }

    /// Everything still waiting when no next fix is coming (silence, a
    /// session's end): the held fixes judged with what came after them (the
    /// newest alone), the smoothing lag emptied.
    public func flush(state: inout DeviceFilterState) -> [Judged] {
        var held = state.lookAhead.held
        state.lookAhead.held = []
        var assessed: [(FilterInput, Verdict)] = []
        while !held.isEmpty {
            let first = held.removeFirst()
            if !held.isEmpty, let verdict = judgeHeld(first, later: held, silent: true, queued: !assessed.isEmpty, state: &state) {
                assessed.append((first, verdict))
            } else {
                assessed.append((first, judgeLast(first, state: &state)))
            }
        }
        return publish(assessed, state: &state) + releaseLagging(before: .max, state: &state)
    }

    /// A whole recording judged as the service judges it: each fix
    /// submitted as if it arrived at its own time (see the next), then what
    /// still waits flushed (the device falls silent).
    public func judgeRecording(_ fixes: [FilterInput], state: inout DeviceFilterState) -> [Judged] {
        var judged: [Judged] = []
        for (i, fix) in fixes.enumerated() { judged += submit(fix, arrivingAfter: i > 0 ? fixes[i - 1].timeMs : nil, state: &state) }
        return judged + flush(state: &state)
    }

    /// `fix` arriving at its own time, the one before it at `previousMs`:
    /// what the service's timer would have published in the silence between
    /// them (see `dueMs`), then what `submit` gives.
    public func submit(_ fix: FilterInput, arrivingAfter previousMs: Int64?, state: inout DeviceFilterState) -> [Judged] {
        var judged: [Judged] = []
        if let previousMs, let due = dueMs(silentSince: previousMs, state: state), fix.timeMs >= due {
            judged += flush(state: &state)
        }
        return judged + submit(fix, state: &state)
    }

    /// Judges the oldest held fix with the fixes after it, or nil while it
    /// may wait for more (never once the device fell `silent`). `queued`: it
    /// came while another was held, which was judged just now.
    private func judgeHeld(_ held: FilterInput, later: [FilterInput], silent: Bool, queued: Bool,
                           state: inout DeviceFilterState) -> Verdict? {
        // Waited a burst's length: up to `burstWindowMs` of fix time, or its worth of fixes.
        let burstFixes = Self.fixesInABurst(after: held, later)
        let waitedBurst = later[later.count - 1].timeMs - held.timeMs >= Self.burstWindowMs || later.count >= burstFixes
        if comesOutOfSilence(held, state: state) {
            return resolveAfterSilence(held, later: later, silent: silent, waitedBurst: waitedBurst, burstFixes: burstFixes, state: &state)
        }
        // A fix with Doppler that came while another was held, and would not
        // have waited on its own (seconds behind the first out of a tunnel),
        // is judged at once: the filter knows its velocity, and the stories
        // told of sparse fixes are not its own.
        if queued, held.speedMps != nil, !waitsForNext(held, state: state) { return assess(held, state: &state) }
        let dense = later[0].timeMs - held.timeMs < Self.lookAheadMinGapMs
        if dense, followsAnOutlier(held, state: state) {
            // The filter has just rejected a fix, and its gate, grown with the
            // time since, now takes one: the tail of a multipath burst, or
            // the device's new track. The old track coming back says which.
            return resolveBurst(held, later: later, final: silent || waitedBurst, state: &state)
        }
        // A second fix is worth waiting for only from a sparse device (a
        // second or two on, the innovation gate tells) and without Doppler:
        // with it the velocity is known and one fix settles it (forty seeds
        // every 15 s with Doppler: a second fix kept more clean fixes but lost
        // 0.2 % of the odometer in loops).
        let final = silent || dense || held.speedMps != nil || later.count >= profile.lookAheadFixes
        return resolve(held, later: later, final: final, state: &state)
    }

    /// The last held fix before silence, no fix after it: judged alone,
    /// and a jump when a reflection explains it better than any way a
    /// steady or a standing device could have got there (with fixes after
    /// it, a jump against a track no later fix confirms is not told; with
    /// none, the track before is all there is). A hundred seeds without
    /// Doppler: jumps through every 10 s 45 → 42, phone every 15 s 77 → 74,
    /// good phone every 10 s 32 → 27; one more clean fix rejected.
    private func judgeLast(_ held: FilterInput, state: inout DeviceFilterState) -> Verdict {
        var through = state
        let verdict = assess(held, state: &through, alone: true)
        // A restart (no step) is the run of outliers before it agreeing, not a lone fix.
        guard verdict.step != nil, held.speedMps == nil,
              let jump = jumpProbability(held, later: [], state: state, alone: true), jump > 0.5 else {
            state = through
            return verdict
        }
        state = skipping(held, state)
        return reject(held, .isolatedJump, state: state, measured: fit(held, state: state)?.distance, limit: nil)
    }

    /// How long what waits for a later fix (held, or in the smoothing lag)
    /// waits on silence (ms); nil when nothing does. See `dueMs`.
    public func waitMs(_ state: DeviceFilterState) -> Int64? {
        dueMs(silentSince: 0, state: state)
    }

    /// When what waits is published if no fix comes (wall clock, ms), given
    /// when the newest fix arrived; nil when nothing waits. A held fix
    /// waits the look-ahead (`heldWaitMs`), the smoothing lag its own
    /// length, or, from a sparse device, its next fix (see `lagWaitMs`).
    public func dueMs(silentSince arrivedMs: Int64, state: DeviceFilterState) -> Int64? {
        if !state.lookAhead.held.isEmpty { return arrivedMs + heldWaitMs(state) }
        if !state.smoothing.waiting.isEmpty { return arrivedMs + lagWaitMs(state) }
        return nil
    }

    /// How long held fixes wait on silence: the look-ahead; the fix that
    /// would start the filter, the first out of a silence from a device
    /// seconds apart (`comesOutOfSilence`), and one after an outlier from
    /// such a device (`followsAnOutlier`), no longer than `silenceMs`. The
    /// fixes that confirm it come seconds apart, and a new device that
    /// reports every minute should not show up half a minute late.
    private func heldWaitMs(_ state: DeviceFilterState) -> Int64 {
        guard let first = state.lookAhead.held.first, state.kalman.track == nil
                || (!reportsSparsely(state) && (comesOutOfSilence(first, state: state) || followsAnOutlier(first, state: state)))
        else { return profile.lookAheadMs }
        return min(profile.lookAheadMs, Self.silenceMs)
    }

    /// How long the smoothing lag waits on silence. A device reporting
    /// every 10–15 s is silent for the lag after every fix: published then,
    /// its point was never smoothed with the next fix, nor its odometer bent
    /// to it. So a sparse device's lag waits for the next fix, half an
    /// interval late at most, within the look-ahead (a device reporting less
    /// often would not send it in time).
    func lagWaitMs(_ state: DeviceFilterState) -> Int64 {
        guard let interval = sparseIntervalMs(state) else { return profile.smoothingLagMs }
        return max(profile.smoothingLagMs, min(profile.lookAheadMs, interval * 3 / 2))
    }

    /// The interval of a device that reports sparsely (`reportsSparsely`)
    /// but within the look-ahead, whose next fix is worth waiting for; nil
    /// for any other, or with the look-ahead off.
    func sparseIntervalMs(_ state: DeviceFilterState) -> Int64? {
        guard profile.lookAhead, reportsSparsely(state), let interval = state.ordering.reportIntervalMs,
              interval <= profile.lookAheadMs else { return nil }
        return interval
    }

    /// A sparse fix the filter would accept, whose next fix is due within the
    /// look-ahead (a device that reports less often gains nothing by waiting),
    /// or one that comes out of a silence or would start the filter
    /// (`comesOutOfSilence`), or one without Doppler after an outlier
    /// (`followsAnOutlier`).
    private func waitsForNext(_ fix: FilterInput, state: DeviceFilterState) -> Bool {
        // Sparse: far from the filter's last update. Worth waiting: the device
        // reports at least every `lookAheadMs`, so the next fix is due in
        // time; after a gap (a tunnel) too, when a sparse device did so
        // before it: the first fix out, judged against a prediction as wide
        // as the gap, is the one a reflection gets through most easily (a
        // hundred seeds every 5 and 10 s: jumps through 26 → 22 and 49 → 44,
        // clean fixes rejected 38 → 26 and 34 → 27). Not a device a second
        // apart: its held fix is judged with the next alone, which after a
        // gap the stale track cannot tell from it (white noise, seed 14: the
        // first clean fix out of the tunnel thrown away, the burst after it
        // taken), nor a fix with Doppler, whose velocity the gate already
        // knows (held, forty seeds every 15 s lost 0.2 % of the odometer).
        // The first fix out of a silence (from a sparse device, with Doppler)
        // and a device's first fix wait by a rule of their own
        // (`comesOutOfSilence`); none does while the device says it stands.
        guard state.stop.externalMotion != .stationary else { return false }
        if let track = state.kalman.track, !comesOutOfSilence(fix, state: state) {
            let gap = fix.timeMs - track.timeMs, interval = fix.timeMs - (state.ordering.newestMs ?? track.timeMs)
            let reportsInTime = interval <= profile.lookAheadMs || (fix.speedMps == nil && sparseIntervalMs(state) != nil)
            // Parked too: a sparse fix far from the stop departs at once, so a
            // jump there would be a departure unless the next fix says otherwise.
            guard gap >= Self.lookAheadMinGapMs || followsAnOutlier(fix, state: state), reportsInTime else { return false }
        }
        var trial = state
        return assess(fix, state: &trial).taken
    }

    /// A fix without Doppler after an outlier, since the filter last took a
    /// fix: the gate has grown with the gap, and a multipath burst's next
    /// reflection gets through it. So it waits for the old track to come back
    /// (`resolveBurst`), at any rate of fixes (it waited only 4 s after the
    /// filter's last update, three rejected fixes at 1 Hz); one on the old
    /// track is taken with the next fix, inside the smoothing lag its point
    /// waits in anyway. On silence it waits no longer than that lag
    /// (`heldWaitMs`).
    func followsAnOutlier(_ fix: FilterInput, state: DeviceFilterState) -> Bool {
        fix.speedMps == nil && !state.kalman.outliers.isEmpty
    }

    /// Judges a held fix knowing the fixes after it, or nil while they leave
    /// it open and it may wait for another (`final` false). Two stories for
    /// each fix: *true*, it lies where a steady vehicle went from the state
    /// before it through the true fixes; *jump*, a reflection put it anywhere
    /// within `jumpRadiusM`, `jumpPrior` of sparse fixes being one. Every way
    /// of telling them for the held fix and those after it is weighed, and
    /// the held fix is a jump when the ways in which it is one are the
    /// likelier. With the next fix alone, a jump there and a jump at the held
    /// fix look alike, so a held fix judged with one fix is a jump only when
    /// that fix is back on the old track.
    func resolve(_ held: FilterInput, later: [FilterInput], final: Bool, state: inout DeviceFilterState) -> Verdict? {
        var through = state
        let verdict = assess(held, state: &through)
        let without = skipping(held, state)
        guard verdict.taken, let bridged = bridge(held, next: later[0], state: state),
              let nextOnTrack = fit(later[0], state: without) else {
            state = through
            return verdict
        }
        let isJump: Bool
        if final, later.count == 1 {
            isJump = nextOnTrack.distance <= Self.backOnTrackSigma
                && Self.jumpStory > log(1 - Self.jumpPrior) + bridged.logLikelihood
        } else if let jump = jumpProbability(held, later: later, state: state) {
            guard final || jump <= Self.settled || jump >= 1 - Self.settled else { return nil }
            isJump = jump > 0.5
        } else {
            isJump = false
        }
        guard isJump else {
            state = through
            return verdict
        }
        state = without
        // The decision log's measured/limit: the held fix's distance from the
        // bridge, the next's from the old track (both in σ).
        return reject(held, .isolatedJump, state: state, measured: bridged.distance, limit: nextOnTrack.distance)
    }

    /// A held fix after an outlier (`followsAnOutlier`), its next fixes seconds apart:
    /// a jump when a later fix comes back to the old track (and is off the
    /// one through the held fix) while the held fix is off it; taken when
    /// none has within `burstWindowMs` (the old track is gone: a real jump,
    /// a filter that lost the device). Nil while it may still come back.
    func resolveBurst(_ held: FilterInput, later: [FilterInput], final: Bool, state: inout DeviceFilterState) -> Verdict? {
        var through = state
        let verdict = assess(held, state: &through)
        guard verdict.taken, let heldOnOld = fit(held, state: state), heldOnOld.distance > Self.backOnTrackSigma else {
            state = through
            return verdict
        }
        // Back on the old track, and off the one through the held fix.
        let back = later.compactMap { next -> (distance: Double, logLikelihood: Double)? in
            guard let old = fit(next, state: state), old.distance <= Self.backOnTrackSigma else { return nil }
            if let new = fit(next, state: through), new.distance <= Self.backOnTrackSigma { return nil }
            return old
        }.first
        guard let back else {
            if !final { return nil }
            state = through
            return verdict
        }
        state = skipping(held, state)
        return reject(held, .isolatedJump, state: state, measured: heldOnOld.distance, limit: back.distance)
    }

    /// How many fixes after `held` make a burst's length when their times do
    /// not (fixes stamped alike, or out of order): `burstFixes` at 1 Hz or
    /// slower; from a device reporting faster, the window's worth at the
    /// rate they came (8 s at 2 Hz is 18), up to `burstFixesAtMost`. A fixed
    /// ten ended the wait at 2 Hz after 5 s, before the 8 s rules could
    /// tell a burst from the road.
    static func fixesInABurst(after held: FilterInput, _ later: [FilterInput]) -> Int {
        let intervalMs = meanIntervalMs(after: held, later)
        let window = Int((burstWindowMs + intervalMs - 1) / intervalMs) + 2
        return min(burstFixesAtMost, max(burstFixes, window))
    }

    /// The fixes after `held` its stories weigh: the first `storyFixes` of
    /// them about a second apart (every second one at 2 Hz), so that they
    /// span as long as at 1 Hz. Twelve fixes at 2 Hz spanned a 7 s burst
    /// alone, which then told the held reflection's story as the track's.
    static func weighedInStories(after held: FilterInput, _ later: [FilterInput]) -> [FilterInput] {
        guard !later.isEmpty else { return [] }
        let intervalMs = meanIntervalMs(after: held, later), every = max(1, Int((1_000 + intervalMs / 2) / intervalMs))
        return stride(from: every - 1, to: later.count, by: every).prefix(storyFixes).map { later[$0] }
    }

    /// The mean interval of the fixes after `held` (ms; at least 1).
    static func meanIntervalMs(after held: FilterInput, _ later: [FilterInput]) -> Int64 {
        max(1, (later[later.count - 1].timeMs - held.timeMs) / Int64(later.count))
    }

    /// Whether `fix` is the first after a silence (a tunnel): `silenceMs` or
    /// more without a fix from a device that reported seconds apart before
    /// it, or, with a usable Doppler velocity (a course from 2 m/s, or
    /// standing), `sparseSilenceIntervals` of its intervals from one that
    /// reported sparsely (within `lookAheadMs`). The gates judge it against a
    /// prediction as wide as the silence: they take a reflection there, and
    /// throw the true fixes after it away as too fast until those have agreed
    /// for a recovery's length. A sparse device's stories fare no better: its
    /// state before a stop or a tunnel says nothing of where it went in
    /// between. So it waits for the fixes after it (`resolveAfterSilence`).
    /// Fixes a second apart tell a reflection by their positions alone; a
    /// sparse device's without a Doppler velocity cannot tell a jump from a
    /// drive over a burst's seconds.
    ///
    /// So does the fix that would start the filter (a device's first), with
    /// a velocity or without: there is no track at all to judge it by, and a
    /// reflection taken there held the road's fixes off for a recovery's
    /// 10 s (a hundred seeds: the one jump through at 1 Hz with the default
    /// noise, and 10 clean fixes refused).
    /// It waits `silenceMs` at most (`heldWaitMs`).
    func comesOutOfSilence(_ fix: FilterInput, state: DeviceFilterState) -> Bool {
        guard profile.lookAhead else { return false }
        if state.kalman.track == nil { return true }
        guard let newest = state.ordering.newestMs, let interval = state.ordering.reportIntervalMs else { return false }
        let silence = fix.timeMs - newest
        guard reportsSparsely(state) else { return silence >= Self.silenceMs }
        return DopplerVelocity(fix) != nil && interval <= profile.lookAheadMs && silence >= Self.sparseSilenceIntervals * interval
    }

    /// Whether the device's newest fix came as a sparse device's do, too far
    /// after the one before for the innovation gate to tell (`lookAheadMinGapMs`).
    func reportsSparsely(_ state: DeviceFilterState) -> Bool {
        (state.ordering.reportIntervalMs ?? 0) >= Self.lookAheadMinGapMs
    }

    /// The first fix out of a silence (`comesOutOfSilence`), judged with the
    /// fixes after it, which know where the device is better than the track
    /// before the silence. Each later fix is counted for the held fix or for
    /// a group of the fixes after it that it could have followed
    /// (`couldFollow`), for the one it fits the closer (`misfit`: seconds
    /// on, a fix could have followed a reflection from almost anywhere the
    /// allowance reaches, and the group's newest fix, a second before, says
    /// more); a fix that fits neither starts a group of its own (a second
    /// reflection must not hide the track).
    ///
    /// - Taken once `followingAfterSilence` fixes were counted for it, the
    ///   newest a burst's length after it (`burstWindowMs`): a burst of
    ///   reflections out of the tunnel follows its own first fix for seconds.
    /// - A jump once a group of `agreeingAfterSilence` fixes or more lasts a
    ///   burst's length itself. Until then a burst right after the held fix
    ///   and one that began with it look the same: the true fixes outlast
    ///   it, or come back to the held fix's side.
    /// - Nil while they leave it open and it may wait: until the device falls
    ///   `silent`, or it `waitedBurst` (twice as long while a group of three
    ///   witnesses against it waits to outlast a burst) and three witnesses
    ///   came, or `burstFixes` (`fixesInABurst`; twice as many then) came. A wait that
    ///   ends first takes it, unless not one fix was counted for it and a
    ///   group of `agreeingAfterSilence` was.
    func resolveAfterSilence(_ held: FilterInput, later: [FilterInput], silent: Bool, waitedBurst: Bool, burstFixes: Int,
                             state: inout DeviceFilterState) -> Verdict? {
        var through = state
        let verdict = assess(held, state: &through)
        guard verdict.taken, let frame = state.kalman.frame ?? through.kalman.frame else {
            state = through
            return verdict
        }
        let limit = maxSpeed(state)
        var groups: [[FilterInput]] = [], following = 0, newest = held, witnessed = 0
        // What the first gates would refuse (out of order, repeated, invalid, too poor) is no witness.
        for next in later where next.timeMs > newest.timeMs && witnesses(next, after: newest) {
            newest = next
            witnessed += 1
            let newestOf = { (g: Int) in groups[g][groups[g].count - 1] }
            let misfit = { (a: FilterInput) in Self.misfit(a, with: next, frame: frame, maxSpeed: limit) }
            let g = groups.indices.filter { Self.couldFollow(newestOf($0), with: next, frame: frame, maxSpeed: limit) }
                .min { misfit(newestOf($0)) < misfit(newestOf($1)) }
            if Self.couldFollow(held, with: next, frame: frame, maxSpeed: limit), g.map({ misfit(held) <= misfit(newestOf($0)) }) ?? true {
                following += 1
                guard following >= Self.followingAfterSilence, next.timeMs - held.timeMs >= Self.burstWindowMs else { continue }
                state = through
                return verdict
            }
            guard let g else {
                groups.append([next])
                continue
            }
            groups[g].append(next)
            let group = groups[g]
            guard group.count >= Self.agreeingAfterSilence, next.timeMs - group[0].timeMs >= Self.burstWindowMs else { continue }
            return jump(against: group)
        }
        // A group against it, once three witnesses came, waits to outlast a burst, twice as long at most.
        let witnessedEnough = witnessed >= Self.agreeingAfterSilence
        let waited = witnessedEnough && !groups.isEmpty
            ? newest.timeMs - held.timeMs >= 2 * Self.burstWindowMs || later.count >= 2 * burstFixes
            : (witnessedEnough && waitedBurst) || later.count >= burstFixes
        guard silent || waited else { return nil }
        // Out of time, and not one fix was counted for it.
        if following == 0, let group = groups.max(by: { $0.count < $1.count }), group.count >= Self.agreeingAfterSilence {
            return jump(against: group)
        }
        state = through
        return verdict

        func jump(against group: [FilterInput]) -> Verdict {
            state = skipping(held, state)
            // The decision log's measured: the held fix's distance in σ (both fixes') from the first of the group.
            return reject(held, .isolatedJump, state: state, measured: Self.distanceInSigma(held, group[0], frame: frame), limit: nil)
        }
    }

    /// Whether `fix`, after `previous`, passes the gates before the prediction:
    /// a valid position, not `previous`'s again, within the accuracy ceiling.
    private func witnesses(_ fix: FilterInput, after previous: FilterInput) -> Bool {
        var judging = Judging(fix, alone: false), scratch = DeviceFilterState()
        judging.previousPosition = .init(latitude: previous.latitude, longitude: previous.longitude)
        return [Gate.validity, .repeatedPosition, .accuracyCeiling].allSatisfy {
            if case .reject = check($0, fix, &judging, &scratch) { return false }
            return true
        }
    }

    /// Whether a device at `a` could be at `b` by `b`'s time. With a Doppler
    /// velocity at both (a reflection moves the position, not the velocity):
    /// within twice both accuracies of where the mean of the two velocities
    /// takes it (a fix's error is often beyond its accuracy, and two fixes'
    /// add up), allowing 1 m/s² of change and a course 3° off at the faster
    /// speed. Otherwise at no more than `maxSpeed`, both accuracies allowed
    /// for (as a recovery's run must agree, `recover`).
    static func couldFollow(_ a: FilterInput, with b: FilterInput, frame: LocalFrame, maxSpeed: Double) -> Bool {
        guard let va = DopplerVelocity(a)?.vector, let vb = DopplerVelocity(b)?.vector else {
            return speedMisfit(a, with: b, frame: frame, maxSpeed: maxSpeed) <= 1
        }
        return velocityMisfit(a, va, with: b, vb, frame: frame) <= 1
    }

    /// How badly `b` fits after `a`, for telling which of two fixes it
    /// followed (0 fits exactly; 1 is as far as `couldFollow` allows with
    /// Doppler): the way from where the velocities take it, against that
    /// allowance; with one velocity only (creeping, or a phone that gives no
    /// course), where that one takes it: a fix merely near a reflection ahead
    /// on the road is not where the reflection's own velocity points.
    /// Without either, the implied speed's share of the top speed.
    static func misfit(_ a: FilterInput, with b: FilterInput, frame: LocalFrame, maxSpeed: Double) -> Double {
        switch (DopplerVelocity(a)?.vector, DopplerVelocity(b)?.vector) {
        case let (va?, vb?): return velocityMisfit(a, va, with: b, vb, frame: frame)
        case let (va?, nil): return velocityMisfit(a, va, with: b, va, frame: frame)
        case let (nil, vb?): return velocityMisfit(a, vb, with: b, vb, frame: frame)
        case (nil, nil): return speedMisfit(a, with: b, frame: frame, maxSpeed: maxSpeed)
        }
    }

    /// The implied speed from `a` to `b`, both accuracies allowed for, as a share of `maxSpeed`.
    private static func speedMisfit(_ a: FilterInput, with b: FilterInput, frame: LocalFrame, maxSpeed: Double) -> Double {
        let (ax, ay) = frame.toLocal(lat: a.latitude, lon: a.longitude), (bx, by) = frame.toLocal(lat: b.latitude, lon: b.longitude)
        return impliedSpeed(hypot(bx - ax, by - ay), accuracies: a.judgedAccuracyM, b.judgedAccuracyM,
                            elapsedMs: b.timeMs - a.timeMs) / maxSpeed
    }

    private static func velocityMisfit(_ a: FilterInput, _ va: (east: Double, north: Double), with b: FilterInput,
                                       _ vb: (east: Double, north: Double), frame: LocalFrame) -> Double {
        let (ax, ay) = frame.toLocal(lat: a.latitude, lon: a.longitude), (bx, by) = frame.toLocal(lat: b.latitude, lon: b.longitude)
        let dt = Double(b.timeMs - a.timeMs) / 1000, accuracies = a.judgedAccuracyM + b.judgedAccuracyM
        let (ex, ey) = (ax + (va.east + vb.east) / 2 * dt, ay + (va.north + vb.north) / 2 * dt)
        let courseError = 0.05 * max(hypot(va.east, va.north), hypot(vb.east, vb.north)) * dt
        return hypot(bx - ex, by - ey) / (2 * accuracies + dt * dt / 2 + courseError)
    }

    /// Two fixes' distance in standard deviations of both.
    static func distanceInSigma(_ a: FilterInput, _ b: FilterInput, frame: LocalFrame) -> Double {
        let (ax, ay) = frame.toLocal(lat: a.latitude, lon: a.longitude), (bx, by) = frame.toLocal(lat: b.latitude, lon: b.longitude)
        let (sa, sb) = (Accuracy.sigma(a.judgedAccuracyM), Accuracy.sigma(b.judgedAccuracyM))
        return hypot(bx - ax, by - ay) / (sa * sa + sb * sb).squareRoot()
    }

    /// The state with `held` judged a jump: its time and place noted (for
    /// ordering and repeats), nothing else learned from it.
    private func skipping(_ held: FilterInput, _ state: DeviceFilterState) -> DeviceFilterState {
        var without = state
        without.ordering.newestMs = held.timeMs
        without.ordering.previousPosition = .init(latitude: held.latitude, longitude: held.longitude)
        return without
    }

    /// Where the stories about `held` start: the filter's state, with an
    /// unknown speed when parked (the held fix would be a departure), or,
    /// `steady` and without Doppler, the steady track, which knows the velocity far better.
    private func storyStart(_ held: FilterInput, _ state: DeviceFilterState, steady: Bool) -> KalmanState.Track? {
        guard var start = state.kalman.track, held.timeMs > start.timeMs else { return nil }
        if state.stop.anchor != nil {
            start.east.vv = max(start.east.vv, Self.unknownVelocityVariance)
            start.north.vv = max(start.north.vv, Self.unknownVelocityVariance)
        } else if steady, held.speedMps == nil, let track = state.lookAhead.steady, track.frame == start.frame, track.timeMs == start.timeMs {
            (start.east, start.north) = (track.east, track.north)
        }
        return start
    }

    /// The probability that `held` is a jump, given the fixes after it (see `resolve`).
    /// The true fixes are told two ways: driving on as the steady track
    /// goes, or standing where it was (in town a sparse device is stopped
    /// at a light often; a steady track still drifting on at the speed
    /// before the braking makes the later fixes, back at the stop, look
    /// like a jump too, and the held one, out and back, like driving).
    func jumpProbability(_ held: FilterInput, later: [FilterInput], state: DeviceFilterState, alone: Bool = false) -> Double? {
        guard let start = storyStart(held, state, steady: true) else { return nil }
        let (frame, east, north) = (start.frame, start.east, start.north)
        let fixes = [held] + Self.weighedInStories(after: held, later)
        let standing = (east: Self.standing(east), north: Self.standing(north))
        var heldJumps = -Double.infinity, all = -Double.infinity
        for story in 0..<(1 << fixes.count) {
            let logLikelihood = Self.logSum(
                log(1 - Self.standingPrior) + storyLikelihood(fixes, story: story, from: (east, north), frame: frame, since: start.timeMs, q: storyQ),
                log(Self.standingPrior) + storyLikelihood(fixes, story: story, from: standing, frame: frame, since: start.timeMs) { _ in Self.standingQ })
            all = Self.logSum(all, logLikelihood)
            // A jump only against a track a later fix confirms: when every
            // fix is a jump, the filter's state is what is wrong.
            if story & 1 != 0, alone || story != (1 << fixes.count) - 1 { heldJumps = Self.logSum(heldJumps, logLikelihood) }
        }
        return exp(heldJumps - all)
    }

    /// How often the device stands still through a story, before looking at
    /// the fixes. A hundred seeds every 15 s without Doppler: 0.05, 0.1, 0.2
    /// and 0.4 let 70, 67, 65 and 64 jumps through (80 without the story)
    /// and reject 28, 34, 44 and 68 clean fixes (25 without).
    static let standingPrior = 0.1
    /// A standing device's velocity variance (m²/s²) and process noise
    /// (m²/s³): it may creep a few metres, not drive off (looser, 1 m²/s²
    /// and 0.05, took slow driving with poor fixes after it for a stop).
    static let standingVelocityVariance = 0.1
    static let standingQ = 0.01

    /// An axis where the device stands: the same place, no speed.
    static func standing(_ axis: AxisFilter) -> AxisFilter {
        var standing = axis
        (standing.velocity, standing.pv, standing.vv) = (0, 0, standingVelocityVariance)
        return standing
    }

    /// One story's log-likelihood: bit i of `story` set, fix i is a jump;
    /// the true ones are fitted in turn to the axes started at `from`.
    private func storyLikelihood(_ fixes: [FilterInput], story: Int, from start: (east: AxisFilter, north: AxisFilter), frame: LocalFrame,
                                 since startMs: Int64, q: (FilterInput) -> Double) -> Double {
        var (e, n) = start
        var timeMs = startMs
        var logLikelihood = 0.0
        for (i, fix) in fixes.enumerated() {
            if story & (1 << i) != 0 { logLikelihood += Self.jumpStory; continue }
            let dt = Double(fix.timeMs - timeMs) / 1000, fixQ = q(fix)
            e.predict(dt: dt, q: fixQ)
            n.predict(dt: dt, q: fixQ)
            logLikelihood += log(1 - Self.jumpPrior) + Self.fit(fix, to: e, n, frame: frame).logLikelihood
            let (x, y) = frame.toLocal(lat: fix.latitude, lon: fix.longitude)
            let sigma = Accuracy.sigma(fix.judgedAccuracyM)
            e.update(position: x, r: sigma * sigma)
            n.update(position: y, r: sigma * sigma)
            timeMs = fix.timeMs
        }
        return logLikelihood
    }

    /// log(eᵃ + eᵇ) without overflow.
    static func logSum(_ a: Double, _ b: Double) -> Double {
        let high = max(a, b)
        return high == -.infinity ? high : high + log(exp(a - high) + exp(b - high))
    }

    /// Where the held fix should be, knowing the state before it and the fix
    /// after it (the smoother run back from the next fix, the held one's
    /// position left out): its distance from there in standard deviations,
    /// and its Gaussian log-likelihood (both axes). Doppler velocities, the
    /// held fix's and the next's, shape the way between: a multipath
    /// reflection moves a fix's position, not its Doppler, and through a
    /// turn the velocities at both ends say where the way bends.
    func bridge(_ held: FilterInput, next: FilterInput, state: DeviceFilterState) -> (distance: Double, logLikelihood: Double)? {
        guard next.timeMs > held.timeMs, let start = storyStart(held, state, steady: false) else { return nil }
        let frame = start.frame
        var (east, north) = (start.east, start.north)
        let (heldVelocity, nextVelocity) = (DopplerVelocity(held), DopplerVelocity(next))
        let q = storyQ(held) * (heldVelocity != nil && nextVelocity != nil ? Self.dopplerBridgeQFactor : 1)
        let toHeld = Double(held.timeMs - start.timeMs) / 1000, toNext = Double(next.timeMs - held.timeMs) / 1000
        east.predict(dt: toHeld, q: q)
        north.predict(dt: toHeld, q: q)
        heldVelocity?.update(&east, &north)
        var eastNext = east, northNext = north
        eastNext.predict(dt: toNext, q: q)
        northNext.predict(dt: toNext, q: q)
        let (nx, ny) = frame.toLocal(lat: next.latitude, lon: next.longitude)
        let nextSigma = Accuracy.sigma(next.judgedAccuracyM)
        var eastAfter = eastNext, northAfter = northNext
        eastAfter.update(position: nx, r: nextSigma * nextSigma)
        northAfter.update(position: ny, r: nextSigma * nextSigma)
        nextVelocity?.update(&eastAfter, &northAfter)
        let eastHeld = Self.smooth(east, predicted: eastNext, smoothedNext: eastAfter, dt: toNext)
        let northHeld = Self.smooth(north, predicted: northNext, smoothedNext: northAfter, dt: toNext)
        return Self.fit(held, to: eastHeld, northHeld, frame: frame)
    }

    /// The bridge's process noise when the held fix and the next both give
    /// a Doppler velocity, as a multiple of the stories'. Knowing the
    /// velocity at both ends, the bridge is narrower than one that knows it
    /// at the start only, and honest speed changes over a sparse interval
    /// stray beyond it. A hundred seeds every 15 s with Doppler: jumps
    /// through 39 → 26, clean fixes taken for jumps 108 → 138 (good phone:
    /// 21 → 11, 157 → 201, odometer −3.8 → −3.9 %); at 1× the noise the good
    /// phone's odometer went to −4.2 %, with 234 clean fixes taken.
    static let dopplerBridgeQFactor = 1.5

    /// The fix's fit to the prediction.
    func fit(_ fix: FilterInput, state: DeviceFilterState) -> (distance: Double, logLikelihood: Double)? {
        guard let track = state.kalman.track, fix.timeMs > track.timeMs else { return nil }
        var east = track.east, north = track.north
        let dt = Double(fix.timeMs - track.timeMs) / 1000
        east.predict(dt: dt, q: storyQ(fix))
        north.predict(dt: dt, q: storyQ(fix))
        return Self.fit(fix, to: east, north, frame: track.frame)
    }

    /// A fix against where the two axes put it: its distance in standard
    /// deviations and its Gaussian log-likelihood (both axes).
    static func fit(_ fix: FilterInput, to east: AxisFilter, _ north: AxisFilter, frame: LocalFrame)
        -> (distance: Double, logLikelihood: Double) {
        let (x, y) = frame.toLocal(lat: fix.latitude, lon: fix.longitude)
        let sigma = Accuracy.sigma(fix.judgedAccuracyM)
        let (ye, se) = east.innovation(x, r: sigma * sigma)
        let (yn, sn) = north.innovation(y, r: sigma * sigma)
        let squared = ye * ye / se + yn * yn / sn
        return (squared.squareRoot(), -squared / 2 - log(2 * Double.pi) - log(se * sn) / 2)
    }

    /// The stories' process noise for `fix` (see `storyQFactor`).
    func storyQ(_ fix: FilterInput) -> Double {
        profile.movingQ * Self.storyQFactor * (fix.speedMps == nil ? Self.noDopplerQFactor : 1)
    }
}

/// The device's way as a steady vehicle would have driven it: the fixes
/// the filter took, with the stories' process noise (`storyQ`), not grown
/// with the gap. Without Doppler the filter's own state forgets the past
/// within a sparse interval (it must, to follow a turn through its gate):
/// every 15 s its velocity is known to about ±7 m/s on each axis. The
/// steady track remembers the fixes before, and the stories start from it.
public struct SteadyTrack: Codable, Sendable, Equatable {
    public var east: AxisFilter, north: AxisFilter
    public var timeMs: Int64
    public var frame: LocalFrame
}

extension FilterCore {
    /// Feeds a fix the filter took to the steady track. The track follows
    /// the filter update for update; after any break (a new frame, a
    /// restart, a recovery, the way out of a stop) it starts again from the
    /// filter's state.
    func noteSteady(_ fix: FilterInput, x: Double, y: Double, r: Double, priorTimeMs: Int64, state: inout DeviceFilterState) {
        // Only the stories about fixes without Doppler read it: a device that
        // always has Doppler never starts one (no work per fix, no saved bytes).
        guard fix.speedMps == nil || state.lookAhead.steady != nil, let track = state.kalman.track else { return }
        guard var steady = state.lookAhead.steady, steady.frame == track.frame, steady.timeMs == priorTimeMs, fix.timeMs > priorTimeMs else {
            state.lookAhead.steady = SteadyTrack(east: track.east, north: track.north, timeMs: fix.timeMs, frame: track.frame)
            return
        }
        let dt = Double(fix.timeMs - steady.timeMs) / 1000, q = storyQ(fix)
        steady.east.predict(dt: dt, q: q)
        steady.north.predict(dt: dt, q: q)
        steady.east.update(position: x, r: r)
        steady.north.update(position: y, r: r)
        steady.timeMs = fix.timeMs
        state.lookAhead.steady = steady
    }
}
