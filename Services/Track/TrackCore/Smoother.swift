import FoundationEssentials
import Model

extension AxisFilter {
    /// The state moved `dt` ahead, leaving this one as it is.
    func predicted(dt: Double, q: Double) -> AxisFilter {
        var next = self
        next.predict(dt: dt, q: q)
        return next
    }

    /// The same state seen with time running backwards: the velocity turns round.
    var reversed: AxisFilter {
        var back = self
        back.velocity = -velocity
        back.pv = -pv
        return back
    }
}

/// A measured fix in a local metric frame.
struct Observation {
    var timeMs: Int64
    var x: Double, y: Double
    /// Position variance per axis, m².
    var r: Double
    /// Doppler velocity (east, north) and its variance, when the fix had speed and course.
    var velocity: (east: Double, north: Double, r: Double)?
}

/// What the live filter published for a point: its causal estimate.
struct LiveEstimate {
    var x: Double, y: Double
    /// Position variance per axis, m² (from the point's accuracy).
    var r: Double
    /// Velocity (east, north), when the point carries speed and course.
    var velocity: (east: Double, north: Double)?
    /// Already smoothed by the filter over the fixes after it (a fix without
    /// Doppler): fused again with them, it would count them twice.
    var smoothed = false
}

/// Two-filter fixed-interval smoothing. The forward half is the live
/// filter's own estimate at each point: it saw every fix, also those it did
/// not publish (drift while standing, steps under the minimum spacing), so
/// it is a better forward filter than one rebuilt from the published points.
/// The backward half is a constant-velocity Kalman filter run from the end
/// of the run over the measured fixes after each point. The two are
/// independent, and their information-weighted fusion is the estimate given
/// the whole run — what Rauch–Tung–Striebel computes, without re-running
/// the forward filter on less information than it had live.
enum Smoother {
    /// White acceleration noise while moving, m²/s³ per second of gap: the
    /// live filter's own (balanced profile), grown with the gap as it does,
    /// because over longer gaps a vehicle holds a turn or a braking.
    static let q = 0.5
    /// The live estimate's velocity variance, m²/s² (about 1 m/s per axis).
    static let liveVelocityVariance = 1.0

    static func smooth(live: [LiveEstimate], _ observations: [Observation]) -> [(x: Double, y: Double)] {
        let n = observations.count
        var result = live.map { (x: $0.x, y: $0.y) }
        guard n > 1, let end = live.last else { return result }
        // The backward filter starts from the live estimate at the run's end.
        let velocityVariance = end.velocity == nil ? 100 : liveVelocityVariance
        var east = AxisFilter(position: end.x, velocity: -(end.velocity?.east ?? 0), positionVariance: end.r, velocityVariance: velocityVariance)
        var north = AxisFilter(position: end.y, velocity: -(end.velocity?.north ?? 0), positionVariance: end.r, velocityVariance: velocityVariance)
        for k in stride(from: n - 2, through: 0, by: -1) {
            let o = observations[k]
            let dt = max(0.001, Double(observations[k + 1].timeMs - o.timeMs) / 1000)
            east = east.predicted(dt: dt, q: q * max(1, dt))
            north = north.predicted(dt: dt, q: q * max(1, dt))
            // Fused before this fix is observed: the live estimate already holds it.
            let forward = live[k]
            if !forward.smoothed {
                result[k].x = fuse(forward.x, forward.velocity?.east, r: forward.r, east.reversed)
                result[k].y = fuse(forward.y, forward.velocity?.north, r: forward.r, north.reversed)
            }
            east.update(position: o.x, r: o.r)
            north.update(position: o.y, r: o.r)
            if let v = o.velocity {
                east.update(velocity: -v.east, r: v.r)
                north.update(velocity: -v.north, r: v.r)
            }
        }
        return result
    }

    /// The position of the information-weighted fusion of a forward estimate
    /// (position, optional velocity, uncorrelated) with a backward state
    /// (full covariance): x = (Pf⁻¹ + Pb⁻¹)⁻¹ (Pf⁻¹ xf + Pb⁻¹ xb). The
    /// velocities matter: the backward position error is mostly its velocity
    /// error times the gap, which the forward velocity corrects.
    private static func fuse(_ p: Double, _ v: Double?, r: Double, _ b: AxisFilter) -> Double {
        let det = b.pp * b.vv - b.pv * b.pv
        guard let v, det > 1e-12 else { return (p * b.pp + b.position * r) / (b.pp + r) }
        let (b11, b12, b22) = (b.vv / det, -b.pv / det, b.pp / det)
        let rv = liveVelocityVariance
        let (i11, i12, i22) = (1 / r + b11, b12, 1 / rv + b22)
        let y1 = p / r + b11 * b.position + b12 * b.velocity
        let y2 = v / rv + b12 * b.position + b22 * b.velocity
        return (i22 * y1 - i12 * y2) / (i11 * i22 - i12 * i12)
    }
}
