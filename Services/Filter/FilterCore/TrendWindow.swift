import Foundation

/// A weighted least-squares velocity over recent fixes, forgetting them
/// exponentially (time constant `tau`). Constant size: a handful of running
/// sums, so it persists with the filter state. Used to tell "stopped" from
/// "moving slowly" when fixes carry no Doppler speed: it reports how fast the
/// device moves *and how sure that is*, so noisy fixes need longer to convince.
public struct TrendWindow: Codable, Sendable, Equatable {
    /// Forgetting time constant, seconds.
    public let tau: Double

    /// Times are kept relative to the newest fix (t = 0 now, negative before).
    var sw = 0.0, swt = 0.0, swtt = 0.0
    var swx = 0.0, swtx = 0.0
    var swy = 0.0, swty = 0.0
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
            let keep = exp(-dt / tau)
            sw *= keep; swt *= keep; swtt *= keep; swx *= keep; swtx *= keep; swy *= keep; swty *= keep
            spanSec += dt
        }
        let w = 1 / (sigma * sigma)
        sw += w; swx += w * x; swy += w * y
        lastMs = timeMs
    }

    /// Velocity magnitude and its standard deviation, once there is enough span.
    public var velocity: (speed: Double, sigma: Double)? {
        let determinant = sw * swtt - swt * swt
        guard spanSec >= min(5, tau), determinant > 0 else { return nil }
        let vx = (sw * swtx - swt * swx) / determinant
        let vy = (sw * swty - swt * swy) / determinant
        return (hypot(vx, vy), (sw / determinant).squareRoot())
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

    /// True when some window's speed, less one standard deviation, is over `limit`.
    public func confidentlyFasterThan(_ limit: Double) -> Bool {
        windows.contains { w in w.velocity.map { $0.speed - $0.sigma > limit } ?? false }
    }

    /// True when some window's speed, plus one standard deviation, is under `limit`.
    public func confidentlySlowerThan(_ limit: Double) -> Bool {
        windows.contains { w in w.velocity.map { $0.speed + $0.sigma < limit } ?? false }
    }
}
