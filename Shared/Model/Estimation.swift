/// A constant-velocity Kalman filter on one axis of the local metric frame.
/// With isotropic position noise and per-axis process noise the east and
/// north axes never correlate, so two of these are the exact 4-state filter
/// at a fraction of the arithmetic.
public struct AxisFilter: Codable, Sendable, Equatable {
    public var position: Double
    public var velocity: Double
    /// Covariance: position, position–velocity, velocity.
    public var pp: Double
    public var pv: Double
    public var vv: Double

    public init(position: Double, velocity: Double, positionVariance: Double, velocityVariance: Double) {
        self.position = position
        self.velocity = velocity
        pp = positionVariance
        pv = 0
        vv = velocityVariance
    }

    /// Moves the state `dt` seconds ahead under white acceleration noise of density `q` (m²/s³).
    public mutating func predict(dt: Double, q: Double) {
        guard dt > 0 else { return }
        position += velocity * dt
        let dt2 = dt * dt
        pp += 2 * dt * pv + dt2 * vv + q * dt2 * dt / 3
        pv += dt * vv + q * dt2 / 2
        vv += q * dt
    }

    /// Innovation and its variance for a position measurement of variance `r`.
    public func innovation(_ z: Double, r: Double) -> (y: Double, s: Double) {
        (z - position, pp + r)
    }

    public mutating func update(position z: Double, r: Double) {
        let s = pp + r
        let kp = pp / s, kv = pv / s
        let y = z - position
        position += kp * y
        velocity += kv * y
        let (opp, opv) = (pp, pv)
        pp = (1 - kp) * opp
        pv = (1 - kp) * opv
        vv -= kv * opv
    }

    public mutating func update(velocity z: Double, r: Double) {
        let s = vv + r
        let kp = pv / s, kv = vv / s
        let y = z - velocity
        position += kp * y
        velocity += kv * y
        let (opv, ovv) = (pv, vv)
        pp -= kp * opv
        pv = (1 - kv) * opv
        vv = (1 - kv) * ovv
    }
}

/// What a fix's reported accuracy says about its error, the same for every
/// stage that weighs positions (the filter, the track's smoother).
public enum Accuracy {
    /// Assumed when a fix reports 0 (some platforms' "unknown").
    public static let unknownM = 30.0
    /// Phones' `acc` is a ~68 % radius; per axis that is about acc / 1.5.
    public static let toSigma = 1 / 1.5
    /// No fix is trusted to better than this per axis.
    public static let minimumSigmaM = 2.0

    /// The accuracy to use: 0 read as unknown.
    public static func meters(_ accuracyM: Double) -> Double { accuracyM == 0 ? unknownM : accuracyM }
    /// Position standard deviation per axis.
    public static func sigma(_ accuracyM: Double) -> Double { max(minimumSigmaM, meters(accuracyM) * toSigma) }
}
