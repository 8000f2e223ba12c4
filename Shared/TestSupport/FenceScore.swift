import FilterCore
import Foundation
import Model
import MotionCore

/// Fence visits on a recording with a known truth: where the fences are,
/// when the truth really crossed them (by its own 1 Hz fixes, independently
/// of the engine), and how the engine's crossings on the filtered noisy fixes
/// compare. Used by the tests and `tracker-bench geofence`.
public enum FenceScore {
    public struct Visit: Equatable, Sendable {
        public var fence: String
        public var enterMs: Int64
        public var exitMs: Int64?
        /// The truth's speed at its crossings.
        public var enterSpeed: Double = .infinity
        public var exitSpeed: Double = .infinity
    }

    public struct Result: Sendable {
        public var trueVisits: Int
        public var reportedVisits: Int
        /// True visits matched by exactly one reported visit.
        public var matched: Int
        /// Entry and exit time errors of the matched visits, seconds, where
        /// fixes came at their rate (a fix within 3 s of the true crossing)
        /// and the device crossed at 2 m/s or more.
        public var errorsSec: [Double]
        /// The same, for crossings inside a gap in the fixes (a tunnel): no rate to meet.
        public var gapErrorsSec: [Double] = []
        /// Crossings at under 2 m/s (slowing to a stop at the edge): a few
        /// metres of position error are many seconds there.
        public var slowErrorsSec: [Double] = []
        public var maxGapErrorSec: Double { gapErrorsSec.max() ?? 0 }
        public var maxSlowErrorSec: Double { slowErrorsSec.max() ?? 0 }
        public var maxErrorSec: Double { errorsSec.max() ?? 0 }
        /// The share of those crossings dated within 5 s.
        public var shareWithin5Sec: Double { errorsSec.isEmpty ? 1 : Double(errorsSec.filter { $0 < 5 }.count) / Double(errorsSec.count) }
        public var meanErrorSec: Double { errorsSec.isEmpty ? 0 : errorsSec.reduce(0, +) / Double(errorsSec.count) }
    }

    /// Fences centred on the truth every `every` fixes, `offsetM` to the side of it.
    public static func fences(along truth: [DeviceFix], every: Int, radiusM: Double, offsetM: Double = 0) -> [Geofence] {
        stride(from: every, to: truth.count, by: every).enumerated().map { n, i in
            let frame = LocalFrame(originLat: truth[i].lat, originLon: truth[i].lon)
            let (lat, lon) = frame.toGeo(x: offsetM, y: 0)
            return Geofence(id: "f\(n)", latitude: lat, longitude: lon, radiusM: radiusM)
        }
    }

    /// The truth's visits: inside where its fix is within the radius, crossing
    /// times where the distance meets the radius, linearly between fixes.
    public static func trueVisits(_ truth: [DeviceFix], _ fences: [Geofence]) -> [Visit] {
        var visits: [Visit] = []
        for fence in fences {
            var open: Visit?
            var previous: (t: Int64, d: Double, speed: Double)?
            for fix in truth {
                let d = Geodesy.distance(fence.latitude, fence.longitude, fix.lat, fix.lon)
                if let p = previous, (p.d <= fence.radiusM) != (d <= fence.radiusM) {
                    let at = p.t + Int64(Double(fix.timeMs - p.t) * (fence.radiusM - p.d) / (d - p.d))
                    let speed = min(p.speed, fix.speed ?? .infinity)
                    if d <= fence.radiusM {
                        open = Visit(fence: fence.id, enterMs: at, enterSpeed: speed)
                    } else if var v = open {
                        v.exitMs = at; v.exitSpeed = speed; visits.append(v); open = nil
                    }
                } else if previous == nil, d <= fence.radiusM {
                    open = Visit(fence: fence.id, enterMs: fix.timeMs)
                }
                previous = (fix.timeMs, d, fix.speed ?? .infinity)
            }
            if let open { visits.append(open) }
        }
        return visits
    }

    /// Visits from a list of crossings (enter … exit per fence).
    public static func visits(_ crossings: [Crossing]) -> [Visit] {
        var open: [String: Visit] = [:], visits: [Visit] = []
        for c in crossings {
            switch c.kind {
            case .enter: open[c.geofenceID] = Visit(fence: c.geofenceID, enterMs: c.timeMs)
            case .exit:
                if var v = open.removeValue(forKey: c.geofenceID) { v.exitMs = c.timeMs; visits.append(v) }
            case .dwell: break
            }
        }
        return visits + open.values
    }

    /// Matches reported visits to true ones (same fence, overlapping in time).
    public static func score(reported: [Visit], truth: [Visit], fixTimes: [Int64], verbose: Bool = false) -> Result {
        var matched = 0, errors: [Double] = [], gapErrors: [Double] = [], slowErrors: [Double] = []
        // Whether a fix came within 3 s of a time (binary search in the sorted times).
        func covered(_ timeMs: Int64) -> Bool {
            var lo = 0, hi = fixTimes.count
            while lo < hi { let mid = (lo + hi) / 2; if fixTimes[mid] < timeMs { lo = mid + 1 } else { hi = mid } }
            return [lo - 1, lo].contains { $0 >= 0 && $0 < fixTimes.count && abs(fixTimes[$0] - timeMs) <= 3_000 }
        }
        func note(_ reported: Int64, _ true: Int64, speed: Double) {
            let error = Double(abs(reported - `true`)) / 1000
            if !covered(`true`) { gapErrors.append(error) } else if speed < 2 { slowErrors.append(error) } else { errors.append(error) }
        }
        for t in truth {
            // Overlapping, give or take 30 s.
            let end = t.exitMs.map { $0 + 30_000 } ?? .max
            let overlapping = reported.filter { $0.fence == t.fence && $0.enterMs <= end && ($0.exitMs ?? .max) >= t.enterMs - 30_000 }
            if verbose, let r = overlapping.first, abs(r.enterMs - t.enterMs) > 5_000 || abs((r.exitMs ?? 0) - (t.exitMs ?? 0)) > 5_000 {
                // Seconds since the recording's start: true visit, then what was reported.
                func s(_ ms: Int64?) -> String { ms.map { String(($0 - (fixTimes.first ?? 0)) / 1000) } ?? "end" }
                print("  off by over 5 s: \(t.fence) true \(s(t.enterMs))…\(s(t.exitMs)) s, reported",
                      overlapping.map { "\(s($0.enterMs))…\(s($0.exitMs))" })
            }
            guard overlapping.count == 1, let r = overlapping.first else { continue }
            matched += 1
            note(r.enterMs, t.enterMs, speed: t.enterSpeed)
            if let a = r.exitMs, let b = t.exitMs { note(a, b, speed: t.exitSpeed) }
        }
        return Result(trueVisits: truth.count, reportedVisits: reported.count, matched: matched, errorsSec: errors,
                      gapErrorsSec: gapErrors, slowErrorsSec: slowErrors)
    }

    /// The survey drive with seeded phone noise, through the filter and the
    /// geofence engine, against its truth.
    public static func surveyDrive(seed: UInt64, every: Int = 120, radiusM: Double = 100, offsetM: Double = 0,
                                   verbose: Bool = false) throws -> Result {
        let truth = try Fixtures.fixes("mtv-drive-truth.jsonl")
        let fences = fences(along: truth, every: every, radiusM: radiusM, offsetM: offsetM)
        let filter = FilterCore()
        var state = DeviceFilterState()
        let index = FenceIndex(fences)
        var visits = FenceVisits(), crossings: [Crossing] = [], previous: TrackPoint?
        let samples = NoiseGenerator(seed: seed).apply(to: truth)
        for (i, sample) in samples.enumerated() {
            guard let point = filter.judge(FilterInput(sample.fix, seq: Int64(i + 1)), state: &state).point else { continue }
            crossings += Geofencing().handle(point: point, previous: previous, visits: &visits, own: index, fleet: nil)
            previous = point
        }
        return score(reported: Self.visits(crossings), truth: trueVisits(truth, fences), fixTimes: samples.map(\.fix.timeMs).sorted(),
                     verbose: verbose)
    }
}
