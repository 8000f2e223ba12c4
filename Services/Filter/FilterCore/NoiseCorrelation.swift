import FoundationEssentials
import Glibc

/// How long a device's position errors persist, learned from the filter's
/// innovations on fixes a second or two apart without Doppler.
///
/// A phone's error wanders: correlated over ~10 s, it looks like slow
/// movement, and a smoother that assumes independent errors is sure of
/// places that are still drifting. The lag-one correlation of the
/// normalized innovations says how much: near 0 for independent errors,
/// towards 1 for a wandering one. `inflation` is the factor by which an
/// average of correlated errors is less certain than one of independent
/// ones (the AR(1) variance inflation), used for `min_spacing` on smoothed points.
public struct NoiseCorrelation: Codable, Sendable, Equatable {
    /// Forgetting time constant (s): a few minutes of driving.
    static let tau = 120.0
    /// Only consecutive fixes this close count (ms).
    static let pairingMs: Int64 = 2_000
    /// Until this much weight is in, nothing is concluded.
    static let minimumWeight = 20.0
    static let maximumCorrelation = 0.9

    var products = 0.0, squares = 0.0, weight = 0.0
    var lastEast: Double?, lastNorth: Double?, lastMs: Int64?

    public init() {}

    /// One fix's innovation on both axes, each divided by its standard deviation.
    mutating func add(east: Double, north: Double, timeMs: Int64) {
        if let lastMs, let lastEast, let lastNorth, timeMs > lastMs, timeMs - lastMs <= Self.pairingMs {
            let keep = exp(-Double(timeMs - lastMs) / 1000 / Self.tau)
            products = keep * products + east * lastEast + north * lastNorth
            squares = keep * squares + (east * east + lastEast * lastEast + north * north + lastNorth * lastNorth) / 2
            weight = keep * weight + 1
        }
        (lastEast, lastNorth, lastMs) = (east, north, timeMs)
    }

    /// A pause in the pairs (a sparse fix, Doppler, a stop): the next fix starts afresh.
    mutating func interrupt() { (lastEast, lastNorth, lastMs) = (nil, nil, nil) }

    /// Whether enough pairs are in to conclude anything.
    var learned: Bool { weight >= Self.minimumWeight && squares > 0 }

    /// The lag-one correlation, 0 until it is learned.
    var correlation: Double {
        guard learned else { return 0 }
        return min(Self.maximumCorrelation, max(0, products / squares))
    }

    /// √((1 + ρ) / (1 − ρ)).
    public var inflation: Double { ((1 + correlation) / (1 - correlation)).squareRoot() }
}
