import Foundation

/// One axis of a constant-velocity model: position and velocity with their covariance.
struct AxisState {
    var p: Double, v: Double
    var pp: Double, pv: Double, vv: Double

    func predicted(dt: Double, q: Double) -> AxisState {
        let dt2 = dt * dt
        return AxisState(p: p + v * dt, v: v,
                         pp: pp + 2 * dt * pv + dt2 * vv + q * dt2 * dt / 3,
                         pv: pv + dt * vv + q * dt2 / 2,
                         vv: vv + q * dt)
    }

    mutating func observe(position z: Double, r: Double) {
        let s = pp + r, kp = pp / s, kv = pv / s, y = z - p
        p += kp * y; v += kv * y
        (pp, pv, vv) = (pp - kp * pp, pv - kp * pv, vv - kv * pv)
    }

    mutating func observe(velocity z: Double, r: Double) {
        let s = vv + r, kp = pv / s, kv = vv / s, y = z - v
        p += kp * y; v += kv * y
        (pp, pv, vv) = (pp - kp * pv, pv - kp * vv, vv - kv * vv)
    }
}

/// A measurement in a local metric frame.
struct Observation {
    var timeMs: Int64
    var x: Double, y: Double
    /// Position variance per axis, m².
    var r: Double
    /// Doppler velocity (east, north) and its variance, when the fix had speed and course.
    var velocity: (east: Double, north: Double, r: Double)?
}

/// Rauch–Tung–Striebel fixed-interval smoothing: a Kalman filter forward,
/// then backward, so every estimate uses the fixes after it as well as
/// before (the live filter can only use the past).
enum Smoother {
    /// White acceleration noise, m²/s³: a vehicle's turns and braking.
    static let q = 3.0

    static func smooth(_ observations: [Observation]) -> [(x: Double, y: Double, vx: Double, vy: Double)] {
        guard let first = observations.first else { return [] }
        let n = observations.count
        var filtered = [(AxisState, AxisState)](), predicted = [(AxisState, AxisState)](), dts = [Double]()
        filtered.reserveCapacity(n); predicted.reserveCapacity(n); dts.reserveCapacity(n)
        var east = AxisState(p: first.x, v: 0, pp: first.r, pv: 0, vv: 100)
        var north = AxisState(p: first.y, v: 0, pp: first.r, pv: 0, vv: 100)
        var lastMs = first.timeMs
        for (i, o) in observations.enumerated() {
            let dt = i == 0 ? 0 : max(0.001, Double(o.timeMs - lastMs) / 1000)
            if i > 0 {
                east = east.predicted(dt: dt, q: q)
                north = north.predicted(dt: dt, q: q)
            }
            predicted.append((east, north))
            dts.append(dt)
            east.observe(position: o.x, r: o.r)
            north.observe(position: o.y, r: o.r)
            if let v = o.velocity {
                east.observe(velocity: v.east, r: v.r)
                north.observe(velocity: v.north, r: v.r)
            }
            filtered.append((east, north))
            lastMs = o.timeMs
        }
        var smoothed = filtered
        if n > 1 {
            for k in stride(from: n - 2, through: 0, by: -1) {
                smoothed[k].0 = backward(filtered[k].0, predicted[k + 1].0, smoothed[k + 1].0, dt: dts[k + 1])
                smoothed[k].1 = backward(filtered[k].1, predicted[k + 1].1, smoothed[k + 1].1, dt: dts[k + 1])
            }
        }
        return smoothed.map { ($0.0.p, $0.1.p, $0.0.v, $0.1.v) }
    }

    /// One RTS step: C = P_f Fᵀ P_pred⁻¹; x_s = x_f + C (x_s,next − x_pred,next).
    private static func backward(_ f: AxisState, _ pred: AxisState, _ next: AxisState, dt: Double) -> AxisState {
        // P_f Fᵀ, with F = [[1, dt], [0, 1]].
        let a = f.pp + dt * f.pv, b = f.pv, c = f.pv + dt * f.vv, d = f.vv
        let det = pred.pp * pred.vv - pred.pv * pred.pv
        guard det > 1e-12 else { return f }
        let (i11, i12, i22) = (pred.vv / det, -pred.pv / det, pred.pp / det)
        // C = (P_f Fᵀ) P_pred⁻¹, rows (a, b) and (c, d).
        let c11 = a * i11 + b * i12, c12 = a * i12 + b * i22
        let c21 = c * i11 + d * i12, c22 = c * i12 + d * i22
        let dp = next.p - pred.p, dv = next.v - pred.v
        var s = f
        s.p += c11 * dp + c12 * dv
        s.v += c21 * dp + c22 * dv
        // Covariance: P_s = P_f + C (P_s,next − P_pred) Cᵀ.
        let epp = next.pp - pred.pp, epv = next.pv - pred.pv, evv = next.vv - pred.vv
        s.pp += c11 * (c11 * epp + c12 * epv) + c12 * (c11 * epv + c12 * evv)
        s.pv += c21 * (c11 * epp + c12 * epv) + c22 * (c11 * epv + c12 * evv)
        s.vv += c21 * (c21 * epp + c22 * epv) + c22 * (c21 * epv + c22 * evv)
        return s
    }
}
