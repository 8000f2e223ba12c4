import FoundationEssentials
import Glibc

/// A least-squares velocity over recent fixes, forgetting them exponentially
/// (time constant `tau`). Constant size: a handful of running sums, so it
/// persists with the filter state. Used to tell "stopped" from "moving
/// slowly" when fixes carry no Doppler speed: it reports how fast the device
/// moves *and how sure that is*, so noisy fixes need longer to convince.
///
/// Fixes are weighted by age only, not by accuracy: with inverse-variance
/// weights a few precise fixes from before a stop outweigh a minute of poor
/// ones during it, and the window keeps reporting the old speed. Each fix's
/// own noise enters the slope's variance instead (the sandwich form).
public struct TrendWindow: Codable, Sendable, Equatable {
    /// Forgetting time constant, seconds.
    public let tau: Double

    /// Times are kept relative to the newest fix (t = 0 now, negative before).
    var sw = 0.0, swt = 0.0, swtt = 0.0
    var swx = 0.0, swtx = 0.0
    var swy = 0.0, swty = 0.0
    /// Σ w²σ², Σ w²σ²t, Σ w²σ²t²: the noise of the fit.
    var svv = 0.0, svvt = 0.0, svvtt = 0.0
    var lastMs: Int64?
    /// Seconds of data the window holds (until it fills, the first fix's age).
    var spanSec = 0.0

    public init(tau: Double) { self.tau = tau }

    public mutating func add(x: Double, y: Double, sigma: Double, timeMs: Int64) {
        if let last = lastMs {
            let dt = Double(timeMs - last) / 1000
            guard dt > 0 else { return }
            // Move the time origin to the new fix, then forget.
            swtt = swtt - 2 * dt * swt + dt * dt * sw
            swt -= dt * sw
            swtx -= dt * swx
            swty -= dt * swy
            svvtt = svvtt - 2 * dt * svvt + dt * dt * svv
            svvt -= dt * svv
            let keep = exp(-dt / tau)
            sw *= keep; swt *= keep; swtt *= keep; swx *= keep; swtx *= keep; swy *= keep; swty *= keep
            let keep2 = keep * keep
            svv *= keep2; svvt *= keep2; svvtt *= keep2
            spanSec += dt
        }
        sw += 1; swx += x; swy += y
        svv += sigma * sigma
        lastMs = timeMs
    }

    /// Velocity magnitude and its standard deviation, once there is enough span.
    public var velocity: (speed: Double, sigma: Double)? {
        guard spanSec >= min(5, tau), sw > 0 else { return nil }
        let meanT = swt / sw
        let spread = swtt - swt * meanT  // Σ w (t − t̄)²
        guard spread > 1e-9 else { return nil }
        let vx = (swtx - meanT * swx) / spread
        let vy = (swty - meanT * swy) / spread
        let noise = svvtt - 2 * meanT * svvt + meanT * meanT * svv  // Σ w²σ² (t − t̄)²
        return (hypot(vx, vy), max(0, noise).squareRoot() / spread)
    }
}

/// Several trend windows at once. A straight-line fit over a window that
/// holds both the drive and the stop reports the average, so a short window
/// notices a stop quickly (with good fixes) and a long one notices it
/// eventually (with poor fixes); any one that is confidently slow suffices.
public struct TrendWindows: Codable, Sendable, Equatable {
    var windows = [TrendWindow(tau: 6), TrendWindow(tau: 15), TrendWindow(tau: 40)]

    public init() {}

    public mutating func add(x: Double, y: Double, sigma: Double, timeMs: Int64) {
        for i in windows.indices { windows[i].add(x: x, y: y, sigma: sigma, timeMs: timeMs) }
    }

    /// Each window's speed ± sigma, for diagnostics.
    public var summary: String {
        windows.map { w in w.velocity.map { "\($0.speed.fixed(1))±\($0.sigma.fixed(1))" } ?? "-" }.joined(separator: " ")
    }

    /// True when some window's speed, less one standard deviation, is over `limit`.
    public func confidentlyFasterThan(_ limit: Double) -> Bool {
        windows.contains { w in w.velocity.map { $0.speed - $0.sigma > limit } ?? false }
    }

    /// True when some window's speed, plus one standard deviation, is under `limit`.
    public func confidentlySlowerThan(_ limit: Double) -> Bool {
        windows.contains { w in w.velocity.map { $0.speed + $0.sigma < limit } ?? false }
    }
}
