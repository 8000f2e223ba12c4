import FoundationEssentials
import Glibc

/// The odometer counts the way the device went between two published
/// points, not the straight line. A second apart the two are the same; ten
/// or fifteen seconds apart, a car turning a corner drives a quarter circle
/// while the line between its fixes cuts across (5 % of a city drive at
/// 15 s). The way is the cubic Hermite curve through both points with the
/// velocities the filter estimated there: the smoothest path that leaves
/// and arrives as the device did.
public enum Odometer {
    /// Closer in time than this, the chord is the way (ms).
    static let curveFromMs: Int64 = 2_500
    /// This far apart or further (the track service's `trackingGapAfterSec`
    /// by default, which calls it a gap from there), the device was dark (a dead battery, a phone in a
    /// drawer) and nothing tells the way it went: the chord counts, as the
    /// track's gaps do. A curve with tangents scaled by a whole gap loops far
    /// off the line: a 15-minute gap came out 22–37 % long. Shorter intervals
    /// keep the curve: published points of a device without Doppler are often
    /// minutes apart while it creeps or stands (a minute's cap shortened those
    /// odometers by 0.2–0.7 % in the sweeps).
    static let curveUpToMs: Int64 = 600_000
    /// The curve is trusted up to this multiple of the chord: longer, the
    /// velocities disagree with the positions (a U-turn, a wrong estimate)
    /// and the chord is the honest count.
    static let longestCurve = 1.6
    /// How far speed × time and the chord may disagree for the curve to count.
    static let agreement = 2.0
    /// A device whose last interval between fixes is at least this long
    /// reports sparsely: between its points up to `sparseTrustedUpToMs`
    /// apart (one to three fixes missed every 15 s), speeds that make the
    /// way longer than twice the chord are a bend or a turn it drove, not
    /// noise, and the curve counts (up to `longestCurve`). A phone every 15 s
    /// with Doppler: the odometer was −5.4 % over the sweep's forty seeds,
    /// −3.0 % so. A second apart, rejected fixes in between still came in, so the
    /// last interval stays short; a device dark for over a minute (a
    /// tunnel) counts the chord at any rate.
    static let sparseFromMs: Int64 = 7_500
    static let sparseTrustedUpToMs: Int64 = 60_000

    /// `reportIntervalMs`: the device's last interval between fixes.
    static func distance(from a: DeviceFilterState.AcceptedPoint, to b: DeviceFilterState.AcceptedPoint, reportIntervalMs: Int64? = nil) -> Double {
        let chord = hypot(b.x - a.x, b.y - a.y)
        let dtMs = b.timeMs - a.timeMs
        guard dtMs >= curveFromMs, dtMs < curveUpToMs, let ae = a.ve, let an = a.vn, let be = b.ve, let bn = b.vn else { return chord }
        let dt = Double(dtMs) / 1000
        // The speeds must tell the same story as the positions: a device
        // that moved about as far as it was going fast. Otherwise (creeping
        // between points held back by min_spacing, where the velocity is
        // mostly noise; a U-turn) the chord is the honest count.
        let travelled = (hypot(ae, an) + hypot(be, bn)) / 2 * dt
        let sparse = (reportIntervalMs ?? 0) >= sparseFromMs && dtMs <= sparseTrustedUpToMs
        guard travelled >= chord / agreement, sparse || travelled <= chord * agreement else { return chord }
        return counted(hermiteLength(a: (a.x, a.y), b: (b.x, b.y), ta: (ae * dt, an * dt), tb: (be * dt, bn * dt)), chord: chord)
    }

    /// What a curve between two points counts: at least the chord, and the
    /// chord when the curve is longer than `longestCurve` of it.
    public static func counted(_ curve: Double, chord: Double) -> Double {
        curve <= chord * longestCurve ? max(chord, curve) : chord
    }

    /// `here` with its velocity as fast as the way either side of it goes:
    /// the mean of the chords' speeds from the point before and to where the
    /// next fix puts the device, when faster than its own. Placed from both
    /// sides, a sparse point's velocity is about the chord across the two
    /// intervals, shorter than the way through a bend, and its curve still
    /// cuts the corner: the survey drive's own positions every 15 s come to
    /// −4.4 % with such tangents, −3.2 % with these (and −3.1 % with its
    /// true velocities). Only the direction is the filter's.
    public static func alongTheWay(_ here: DeviceFilterState.AcceptedPoint, after last: DeviceFilterState.AcceptedPoint,
                            before next: (x: Double, y: Double, timeMs: Int64)) -> DeviceFilterState.AcceptedPoint {
        guard let ve = here.ve, let vn = here.vn, here.timeMs > last.timeMs, next.timeMs > here.timeMs else { return here }
        let speed = hypot(ve, vn)
        let wayOut = hypot(next.x - here.x, next.y - here.y) / (Double(next.timeMs - here.timeMs) / 1000)
        // Across a gap the way in says nothing of the speed here: the way out alone.
        let along: Double
        if here.timeMs - last.timeMs >= curveUpToMs {
            along = wayOut
        } else {
            let wayIn = hypot(here.x - last.x, here.y - last.y) / (Double(here.timeMs - last.timeMs) / 1000)
            along = (wayIn + wayOut) / 2
        }
        guard speed > 0.1, along > speed else { return here }
        var bent = here
        (bent.ve, bent.vn) = (ve / speed * along, vn / speed * along)
        return bent
    }

    /// Length of the cubic Hermite curve from `a` to `b` with tangents `ta`,
    /// `tb` (per unit parameter), by 16 chords (under 0.1 % short on a quarter circle).
    public static func hermiteLength(a: (Double, Double), b: (Double, Double), ta: (Double, Double), tb: (Double, Double)) -> Double {
        func at(_ s: Double) -> (Double, Double) {
            let s2 = s * s, s3 = s2 * s
            let h00 = 2 * s3 - 3 * s2 + 1, h10 = s3 - 2 * s2 + s, h01 = -2 * s3 + 3 * s2, h11 = s3 - s2
            return (h00 * a.0 + h10 * ta.0 + h01 * b.0 + h11 * tb.0, h00 * a.1 + h10 * ta.1 + h01 * b.1 + h11 * tb.1)
        }
        var length = 0.0
        var previous = a
        for i in 1...16 {
            let p = at(Double(i) / 16)
            length += hypot(p.0 - previous.0, p.1 - previous.1)
            previous = p
        }
        return length
    }
}
