import Foundation
import Model

/// SplitMix64: small, fast, and the same sequence on every machine.
public struct SeededRandom: RandomNumberGenerator, Sendable {
    private var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    /// A standard normal deviate (Box–Muller).
    public mutating func gaussian() -> Double {
        let u1 = max(Double.leastNonzeroMagnitude, Double.random(in: 0..<1, using: &self))
        let u2 = Double.random(in: 0..<1, using: &self)
        return (-2 * log(u1)).squareRoot() * cos(2 * .pi * u2)
    }
}

/// A fix with what the generator knows about it.
public struct NoisySample: Sendable {
    public var fix: DeviceFix
    public var truthLat: Double
    public var truthLon: Double
    /// A multipath jump: a wrong position reported with an ordinary accuracy.
    public var isJump: Bool
}

/// Phone-like noise on a true path: accuracy swinging 5–65 m, position
/// error scaled by it and correlated over a few seconds, multipath jumps
/// of 80–400 m in short bursts, and a tunnel gap. Seeded, so every run
/// scores the same data.
public struct NoiseGenerator: Sendable {
    public var seed: UInt64
    public var jumpProbability = 0.02
    public var tunnelGapSec = 90.0
    /// Error correlation from one second to the next.
    public var correlation = 0.3
    /// How many fixes in a row a multipath jump lasts.
    public var jumpBurst = 1...3
    /// The range the reported accuracy wanders in (m).
    public var accuracyRange = 5.0...65.0
    /// How much larger the errors are than the reported accuracy says (1:
    /// honest; phones in built-up areas often report too small a figure).
    public var optimism = 1.0

    public init(seed: UInt64) { self.seed = seed }

    /// The noisy drive as its device would publish it: one JSON fix a line.
    public func lines(over truth: [DeviceFix]) throws -> [String] {
        try apply(to: truth).map { String(decoding: try JSONEncoder().encode($0.fix), as: UTF8.self) }
    }

    public func apply(to truth: [DeviceFix]) -> [NoisySample] {
        var rng = SeededRandom(seed: seed)
        guard let first = truth.first, let last = truth.last else { return [] }
        let frame = LocalFrame(originLat: first.lat, originLon: first.lon)
        // The tunnel: a silent stretch around the middle of the drive, where the device moves.
        let middle = first.t + (last.t - first.t) * 0.55
        let tunnelStart = truth.first { $0.t >= middle && ($0.speed ?? 0) > 5 }?.t ?? middle
        var logAccuracy = log(min(accuracyRange.upperBound, max(accuracyRange.lowerBound, 15.0)))
        var ex = 0.0, ey = 0.0
        var jumpLeft = 0
        var jumpOffset = (0.0, 0.0)
        var samples: [NoisySample] = []
        for point in truth {
            // Accuracy: a bounded random walk in log space, within `accuracyRange` (5–65 m unless said).
            logAccuracy += rng.gaussian() * 0.15
            logAccuracy = min(log(accuracyRange.upperBound), max(log(accuracyRange.lowerBound), logAccuracy))
            let accuracy = exp(logAccuracy)
            let sigma = accuracy / 1.5 * optimism
            let innovation = (1 - correlation * correlation).squareRoot()
            ex = correlation * ex + innovation * sigma * rng.gaussian()
            ey = correlation * ey + innovation * sigma * rng.gaussian()
            if point.t >= tunnelStart && point.t < tunnelStart + tunnelGapSec { continue }

            var isJump = false
            if jumpLeft == 0, Double.random(in: 0..<1, using: &rng) < jumpProbability {
                jumpLeft = Int.random(in: jumpBurst, using: &rng)
                let distance = Double.random(in: 80...400, using: &rng)
                let angle = Double.random(in: 0..<(2 * .pi), using: &rng)
                jumpOffset = (distance * cos(angle), distance * sin(angle))
            }
            var (x, y) = frame.toLocal(lat: point.lat, lon: point.lon)
            var reportedAccuracy = accuracy
            if jumpLeft > 0 {
                // Multipath: a position 80–400 m from the truth, reported with
                // an optimistic accuracy, as receivers do when they lock on a reflection.
                x += jumpOffset.0; y += jumpOffset.1
                reportedAccuracy = min(accuracy, Double.random(in: 8...25, using: &rng))
                jumpLeft -= 1
                isJump = true
            } else {
                x += ex; y += ey
            }
            let (lat, lon) = frame.toGeo(x: x, y: y)
            var speed: Double? = nil, course: Double? = nil
            if let s = point.speed {
                speed = max(0, s + rng.gaussian() * 0.3)
                if s > 1, let c = point.course { course = (c + rng.gaussian() * 5).truncatingRemainder(dividingBy: 360); if course! < 0 { course! += 360 } }
            }
            let fix = DeviceFix(t: point.t, lat: lat, lon: lon, acc: (reportedAccuracy * 10).rounded() / 10, speed: speed, course: course)
            samples.append(NoisySample(fix: fix, truthLat: point.lat, truthLon: point.lon, isJump: isJump))
        }
        return samples
    }

    /// A device parked for `hours` at 1 Hz: correlated drift (σ ≈ 8 m, minutes
    /// long), accuracy 10–40 m, and the occasional jump.
    public func parked(lat: Double, lon: Double, hours: Double, startT: Double = 1_700_000_000) -> [NoisySample] {
        var rng = SeededRandom(seed: seed)
        let frame = LocalFrame(originLat: lat, originLon: lon)
        var dx = 0.0, dy = 0.0
        let tau = 120.0, drift = 8.0
        let keep = exp(-1 / tau)
        let kick = drift * (1 - keep * keep).squareRoot()
        var samples: [NoisySample] = []
        for i in 0..<Int(hours * 3600) {
            dx = keep * dx + kick * rng.gaussian()
            dy = keep * dy + kick * rng.gaussian()
            var x = dx + rng.gaussian() * 3, y = dy + rng.gaussian() * 3
            let isJump = Double.random(in: 0..<1, using: &rng) < 0.002
            if isJump { x += Double.random(in: 60...200, using: &rng); y += Double.random(in: -100...100, using: &rng) }
            let (la, lo) = frame.toGeo(x: x, y: y)
            let accuracy = 10 + 30 * abs(sin(Double(i) / 900))
            samples.append(NoisySample(fix: DeviceFix(t: startT + Double(i), lat: la, lon: lo, acc: accuracy.rounded(), speed: 0),
                                       truthLat: lat, truthLon: lon, isJump: isJump))
        }
        return samples
    }
}

/// One way of degrading the truth for scoring: the generator's noise with
/// its own correlation and jump rate, with or without Doppler speed and
/// course, and one fix in `every` (phones saving battery).
public struct NoiseVariant: Sendable {
    public var name: String
    public var correlation = 0.3
    public var jumpProbability = 0.02
    public var every = 1
    public var withSpeed = true
    public var jumpBurst = 1...3
    public var accuracyRange = 5.0...65.0
    public var optimism = 1.0
    /// Every fix reports this accuracy, whatever its error, as a source
    /// without one does (a GPX track without `<hdop>` reads as 10 m; 0 is unknown).
    public var reportedAccuracy: Double?

    public init(_ name: String, correlation: Double = 0.3, jumpProbability: Double = 0.02, every: Int = 1, withSpeed: Bool = true,
                jumpBurst: ClosedRange<Int> = 1...3, accuracyRange: ClosedRange<Double> = 5.0...65.0, reportedAccuracy: Double? = nil) {
        self.name = name
        self.correlation = correlation
        self.jumpProbability = jumpProbability
        self.every = every
        self.withSpeed = withSpeed
        self.jumpBurst = jumpBurst
        self.accuracyRange = accuracyRange
        self.reportedAccuracy = reportedAccuracy
    }

    /// The noisy fixes for `seed`, and the yardstick: the truth sampled the same way.
    public func apply(to truth: [DeviceFix], seed: UInt64) -> (samples: [NoisySample], truthPath: [(lat: Double, lon: Double)]) {
        var generator = NoiseGenerator(seed: seed)
        generator.correlation = correlation
        generator.jumpProbability = jumpProbability
        generator.jumpBurst = jumpBurst
        generator.accuracyRange = accuracyRange
        generator.optimism = optimism
        let samples = generator.apply(to: truth).enumerated().filter { $0.offset % every == 0 }.map { _, sample in
            var sample = sample
            if !withSpeed { sample.fix.speed = nil; sample.fix.course = nil }
            if let reportedAccuracy { sample.fix.acc = reportedAccuracy }
            return sample
        }
        let truthPath = truth.enumerated().filter { $0.offset % every == 0 }.map { (lat: $0.element.lat, lon: $0.element.lon) }
        return (samples, truthPath)
    }
}
