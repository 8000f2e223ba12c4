import FoundationEssentials
import Glibc
import Model

/// Where a point goes: a position, its uncertainty and the velocity there.
struct Placement {
    var latitude: Double, longitude: Double
    /// The larger axis's standard deviation (m).
    var sigma: Double
    var speed: Double
    /// Degrees clockwise from north.
    var course: Double

    init(_ east: AxisFilter, _ north: AxisFilter, frame: LocalFrame) {
        (latitude, longitude) = frame.toGeo(x: east.position, y: north.position)
        sigma = max(east.pp, north.pp).squareRoot()
        speed = hypot(east.velocity, north.velocity)
        course = atan2(east.velocity, north.velocity) * 180 / .pi
        if course < 0 { course += 360 }
    }

    /// The decision log's estimate: accuracy as a phone reports it.
    var estimate: Estimate {
        Estimate(latitude: latitude, longitude: longitude, accuracyM: sigma / Accuracy.toSigma, speedMps: speed)
    }
}

/// A fix waiting in the smoothing lag, with what the forward pass made of it.
public struct Lagging: Codable, Sendable, Equatable {
    public var fix: FilterInput
    public var verdict: Verdict
}

/// Fixes without Doppler speed are published a few seconds late, smoothed.
///
/// Without Doppler the forward filter learns the velocity from the
/// positions alone, so each estimate carries much of its fix's noise (a
/// zig-zag that makes the line ~10 % long at 1 Hz) and lags in turns. A
/// fixed-lag Rauch–Tung–Striebel smoother runs the filter back over the
/// lag's fixes after each one (`lagMs`: the profile's `smoothingLagMs`, or
/// two intervals of a sparse device) before placing its point: the later
/// fixes say where it really was. Gates are still decided by the forward
/// filter as each fix comes; only the point's place, and with it
/// `min_spacing`, waits, but for a fix a restart takes back
/// (`takeBackWhatTheRunDenies`). Every verdict keeps its fix's order and time.
extension FilterCore {
    /// Whether this fix's verdict waits in the lag. One with Doppler is
    /// published at once, after whatever still waits.
    func lags(_ fix: FilterInput) -> Bool {
        profile.smoothingLagMs > 0 && fix.speedMps == nil
    }

    /// Publishes assessed fixes: at once when they have Doppler (after
    /// everything still waiting), otherwise through the lag.
    func publish(_ assessed: [(FilterInput, Verdict)], state: inout DeviceFilterState) -> [Judged] {
        var due: [Judged] = []
        for (fix, verdict) in assessed {
            if lags(fix) {
                state.smoothing.waiting.append(Lagging(fix: fix, verdict: verdict))
            } else {
                due += releaseLagging(before: .max, state: &state)
                due.append(Judged(fix: fix, verdict: conclude(verdict, fix: fix, state: &state)))
            }
        }
        if let newest = state.smoothing.waiting.last?.fix.timeMs {
            due += releaseLagging(before: newest - lagMs(state) + 1, state: &state)
        }
        return due
    }

    /// How far behind the newest fix a waiting fix is published: the
    /// profile's lag; from a device reporting sparsely (every 4–30 s), at
    /// least two of its intervals, so each point is smoothed with the two
    /// fixes after it, not only the next.
    func lagMs(_ state: DeviceFilterState) -> Int64 {
        guard profile.smoothingLagMs > 0, let interval = sparseIntervalMs(state) else { return profile.smoothingLagMs }
        return max(profile.smoothingLagMs, 2 * interval)
    }

    /// A run of outliers that agree and restart the filter says where the
    /// device was from `first` on. A fix still waiting in the lag from which
    /// the device could not have reached `first` was off (the reflection
    /// the filter took before it lost the device): it is rejected as
    /// `implied_speed`, `measured` the speed to `first`, instead of
    /// published, and keeps the estimate it was judged with. Only what
    /// still waits: with a lag shorter than `recoveryMs`, or a fix with
    /// Doppler (published at once), nothing is taken back.
    func takeBackWhatTheRunDenies(_ first: DeviceFilterState.OutlierFix, state: inout DeviceFilterState) {
        guard let frame = state.kalman.frame else { return }
        let limit = maxSpeed(state)
        for index in state.smoothing.waiting.indices {
            let entry = state.smoothing.waiting[index]
            guard entry.verdict.step != nil, entry.fix.timeMs < first.timeMs else { continue }
            let (x, y) = entry.fix.local(frame)
            let speed = Self.impliedSpeed(hypot(first.x - x, first.y - y), accuracies: entry.fix.judgedAccuracyM, first.accuracyM,
                                          elapsedMs: first.timeMs - entry.fix.timeMs)
            guard speed > limit else { continue }
            state.smoothing.waiting[index].verdict = reject(entry.fix, .impliedSpeed, estimate: entry.verdict.decision.estimate,
                                                            measured: speed, limit: limit)
        }
    }

    /// Publishes the waiting fixes older than `beforeMs`, each placed by the
    /// smoother over every waiting fix after it.
    func releaseLagging(before beforeMs: Int64, state: inout DeviceFilterState) -> [Judged] {
        let waiting = state.smoothing.waiting
        guard let first = waiting.first, first.fix.timeMs < beforeMs else { return [] }
        let smoothed = Self.smoothed(waiting.map(\.verdict.step))
        var due: [Judged] = []
        var released = 0
        for (index, (entry, placement)) in zip(waiting, smoothed).enumerated() where entry.fix.timeMs < beforeMs {
            released += 1
            guard let placed = placement, let step = entry.verdict.step else {
                due.append(Judged(fix: entry.fix, verdict: published(entry.verdict, state: &state)))
                continue
            }
            // Smoothed fixes a second or two apart share most of their error
            // (the same later fixes smoothed both): a step of one standard
            // deviation is already movement — of the deviation as it really
            // is, inflated when the device's errors wander (the smoother takes
            // them for independent). Sparse ones each carry their own fix's
            // error, so a step must be significant at about 95 %.
            let dense = step.timeMs - step.priorTimeMs <= Self.denseIntervalMs
            let sigmas = dense ? Self.denseSpacingSigmas(state.kalman.noise, sinceMs: state.odometer.lastPoint.map { step.timeMs - $0.timeMs }) : 2.0
            // Where the next fix puts the device: the odometer's tangent here.
            let ahead = waiting.indices.dropFirst(index + 1).lazy.compactMap { i in smoothed[i].map { ($0, waiting[i].fix.timeMs) } }.first
            due.append(Judged(fix: entry.fix, verdict: place(placed, fix: entry.fix, minimum: sigmas * placed.sigma, ahead: ahead, state: &state)))
        }
        state.smoothing.waiting = Array(waiting.dropFirst(released))
        return due
    }

    /// Fixes at most this far apart count as dense for the spacing rule (ms).
    static let denseIntervalMs: Int64 = 2_000

    /// How many standard deviations a dense point must be from the last
    /// published one: the wandering errors' inflation (see
    /// `NoiseCorrelation`), its wander counted twice as the time since the
    /// last point grows. Two points Δt apart share ρ^Δt of their wander; the
    /// rest is a step of its own, and creeping in traffic, where min_spacing
    /// holds points back for many seconds, the steps were the wander's (a
    /// hundred seeds of phone noise at 1 Hz: odometer +3.1 → +1.2 %, line
    /// +1.8 → −0.2 %; the default noise, whose errors wander less, −0.7 →
    /// −1.2 %; white noise unchanged, having none).
    static func denseSpacingSigmas(_ noise: NoiseCorrelation?, sinceMs: Int64?) -> Double {
        guard let noise else { return 1 }
        let shared = sinceMs.map { pow(noise.correlation, Double(max(0, $0)) / 1000) } ?? 1
        return 1 + (noise.inflation - 1) * (2 - shared)
    }

    /// Rauch–Tung–Striebel over the steps (nil: not a Kalman update). A
    /// step that did not follow the one before (a restart, a stop's drift
    /// updates in between, a new frame) begins a new run.
    static func smoothed(_ steps: [FilterStep?]) -> [Placement?] {
        var placements = [Placement?](repeating: nil, count: steps.count)
        var later: (step: FilterStep, east: AxisFilter, north: AxisFilter)?
        for index in steps.indices.reversed() {
            guard let step = steps[index] else { continue }
            var east = step.east, north = step.north
            if let later, later.step.frame == step.frame, later.step.priorTimeMs == step.timeMs {
                let dt = Double(later.step.timeMs - step.timeMs) / 1000
                east = smooth(step.east, predicted: later.step.predictedEast, smoothedNext: later.east, dt: dt)
                north = smooth(step.north, predicted: later.step.predictedNorth, smoothedNext: later.north, dt: dt)
            }
            placements[index] = Placement(east, north, frame: step.frame)
            later = (step, east, north)
        }
        return placements
    }

    /// One backward step of the smoother on one axis.
    static func smooth(_ filtered: AxisFilter, predicted: AxisFilter, smoothedNext: AxisFilter, dt: Double) -> AxisFilter {
        // C = P Fᵀ P⁻¹(predicted), with F = [1 dt; 0 1].
        let a = filtered.pp + dt * filtered.pv, b = filtered.pv
        let c = filtered.pv + dt * filtered.vv, d = filtered.vv
        let det = predicted.pp * predicted.vv - predicted.pv * predicted.pv
        guard det > 1e-12 else { return filtered }
        let (ip, iq, ir) = (predicted.vv / det, -predicted.pv / det, predicted.pp / det)  // inverse: [ip iq; iq ir]
        let c11 = a * ip + b * iq, c12 = a * iq + b * ir
        let c21 = c * ip + d * iq, c22 = c * iq + d * ir
        let dx = smoothedNext.position - predicted.position, dv = smoothedNext.velocity - predicted.velocity
        var out = filtered
        out.position += c11 * dx + c12 * dv
        out.velocity += c21 * dx + c22 * dv
        // P(smoothed) = P + C (P(next, smoothed) − P(predicted)) Cᵀ.
        let ep = smoothedNext.pp - predicted.pp, ev = smoothedNext.pv - predicted.pv, ew = smoothedNext.vv - predicted.vv
        let m11 = c11 * ep + c12 * ev, m12 = c11 * ev + c12 * ew
        let m21 = c21 * ep + c22 * ev, m22 = c21 * ev + c22 * ew
        out.pp = max(0, filtered.pp + m11 * c11 + m12 * c12)
        out.pv = filtered.pv + m11 * c21 + m12 * c22
        out.vv = max(0, filtered.vv + m21 * c21 + m22 * c22)
        return out
    }
}
