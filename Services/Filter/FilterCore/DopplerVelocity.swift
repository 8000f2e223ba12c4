import FoundationEssentials
import Model

/// What a fix's Doppler says of the device's velocity. Doppler speed is far
/// better than differenced positions, and a multipath reflection that moves
/// a fix's position leaves it true. Its course is only meaningful when
/// moving; standing needs none; between a walk and a drive without a
/// usable course it says nothing the filter uses.
enum DopplerVelocity {
    case standing
    /// Per axis (m/s), with the variance of each (m²/s²).
    case moving(east: Double, north: Double, variance: Double)

    /// Below this the device stands (m/s).
    static let standingBelowMps = 0.3
    /// From this up, with a course, the velocity is used (m/s).
    static let movingFromMps = 2.0

    init?(_ fix: FilterInput) {
        guard let speed = fix.speedMps else { return nil }
        if speed < Self.standingBelowMps {
            self = .standing
        } else if let course = fix.courseDeg, speed >= Self.movingFromMps {
            let velocity = Geodesy.velocity(speed: speed, courseDeg: course)
            self = .moving(east: velocity.east, north: velocity.north, variance: FilterCore.dopplerVelocityVariance(speed: speed))
        } else {
            return nil
        }
    }

    /// The velocity (m/s per axis): none standing.
    var vector: (east: Double, north: Double) {
        switch self {
        case .standing: (0, 0)
        case let .moving(east, north, _): (east, north)
        }
    }

    /// The velocity into the axes, as a measurement.
    func update(_ east: inout AxisFilter, _ north: inout AxisFilter) {
        switch self {
        case .standing:
            east.update(velocity: 0, r: 0.09)
            north.update(velocity: 0, r: 0.09)
        case let .moving(ve, vn, variance):
            east.update(velocity: ve, r: variance)
            north.update(velocity: vn, r: variance)
        }
    }
}
