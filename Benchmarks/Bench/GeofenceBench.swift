import FilterCore
import Foundation
import Model
import MotionCore
import TestSupport

/// `tracker-bench geofence`: how well fence visits are told on the noisy
/// survey drive, and how fast the engine checks points against many fences.
enum GeofenceBench {
    static func run(verbose: Bool) throws {
        for (label, radius, offset) in [("100 m fences on the route", 100.0, 0.0), ("200 m fences 120 m off it", 200.0, 120.0)] {
            for seed: UInt64 in 1...5 {
                let r = try FenceScore.surveyDrive(seed: seed, radiusM: radius, offsetM: offset, verbose: verbose)
                print(String(format: "%@, seed %llu: %d of %d true visits reported once (%d reported); crossing error at 1 Hz and ≥ 2 m/s mean %.1f s, %.0f %% within 5 s, max %.1f s (%d crossings); slower max %.1f s (%d); in the tunnel gap max %.1f s (%d)",
                             label as NSString, seed, r.matched, r.trueVisits, r.reportedVisits, r.meanErrorSec, r.shareWithin5Sec * 100, r.maxErrorSec, r.errorsSec.count,
                             r.maxSlowErrorSec, r.slowErrorsSec.count, r.maxGapErrorSec, r.gapErrorsSec.count))
            }
        }
        let (indexed, scan) = throughput()
        print(String(format: "geofence engine: %.2f M points/s on one core, 1,000 fences per device and 1,000 for the fleet "
                     + "(a plain scan of those 2,000 fences, distances only: %.2f M points/s)", indexed / 1e6, scan / 1e6))
    }

    /// Points along a 20 km drive through a city of 1,000 fences (and 1,000
    /// fleet fences), one core, the engine alone.
    static func throughput(points: Int = 2_000_000) -> (indexed: Double, scan: Double) {
        var rng = SeededRandom(seed: 9)
        let frame = LocalFrame(originLat: 48.1, originLon: 11.5)
        func fences(_ prefix: String) -> FenceIndex {
            FenceIndex((0..<1_000).map { i in
                let (lat, lon) = frame.toGeo(x: Double.random(in: -10_000...10_000, using: &rng), y: Double.random(in: -10_000...10_000, using: &rng))
                return Geofence(id: "\(prefix)\(i)", latitude: lat, longitude: lon, radiusM: Double.random(in: 50...500, using: &rng))
            }, fleet: prefix == "f")
        }
        let own = fences("d"), fleet = fences("f")
        // A drive at 15 m/s, 1 Hz, winding across the city.
        let track: [TrackPoint] = (0..<20_000).map { t in
            let s = Double(t) * 15
            let (lat, lon) = frame.toGeo(x: -9_000 + s.truncatingRemainder(dividingBy: 18_000), y: 8_000 * sin(s / 3_000))
            return TrackPoint(seq: Int64(t + 1), sessionID: nil, timeMs: Int64(t) * 1000, latitude: lat, longitude: lon, accuracyM: 8, odometerM: s)
        }
        let engine = Geofencing()
        var visits = FenceVisits(), crossings = 0
        let start = DispatchTime.now().uptimeNanoseconds
        for i in 0..<points {
            let point = track[i % track.count], previous = i % track.count == 0 ? nil : track[i % track.count - 1]
            crossings += engine.handle(point: point, previous: previous, visits: &visits, own: own, fleet: fleet).count
        }
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        precondition(crossings > 0, "the drive crossed no fence: the benchmark measures nothing")
        // What the index saves: the distance to every fence, and nothing else.
        let all = own.fences + fleet.fences, scanned = points / 20
        var inside = 0
        let scanStart = DispatchTime.now().uptimeNanoseconds
        for i in 0..<scanned {
            let point = track[i % track.count]
            for fence in all where Geodesy.distance(fence.fence.latitude, fence.fence.longitude, point.latitude, point.longitude) <= fence.fence.radiusM {
                inside += 1
            }
        }
        let scanSeconds = Double(DispatchTime.now().uptimeNanoseconds - scanStart) / 1e9
        precondition(inside > 0)
        return (Double(points) / seconds, Double(scanned) / scanSeconds)
    }
}
