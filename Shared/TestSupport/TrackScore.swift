import FilterCore
import Foundation
import Model
import TrackCore

/// The built track against the truth: the noisy fixes through the filter
/// (as the service would store them), the track built from its points, and
/// both the live points and the built line compared with where the device
/// really was at each point's time.
public struct TrackScore: Sendable, CustomStringConvertible {
    public var liveRMSE: Double
    public var builtRMSE: Double
    public var builtLengthM: Double
    public var truthLengthM: Double
    public var segments: String

    public var rmseRatio: Double { builtRMSE / liveRMSE }
    public var lengthError: Double { builtLengthM / truthLengthM - 1 }

    public var description: String {
        String(format: "built RMSE %.1f m vs live %.1f m (ratio %.2f), length %.0f m vs truth %.0f m (%+.1f %%), %@",
               builtRMSE, liveRMSE, rmseRatio, builtLengthM, truthLengthM, lengthError * 100, segments)
    }

    public static func score(_ variant: NoiseVariant, seed: UInt64, options: TrackOptions = TrackOptions()) throws -> TrackScore {
        let truth = try Fixtures.fixes("mtv-drive-truth.jsonl")
        let (samples, truthPath) = variant.apply(to: truth, seed: seed)
        let filter = FilterCore()
        var state = DeviceFilterState(), stored: [StoredPoint] = []
        var truthAt: [Int64: (Double, Double)] = [:]
        // The live points as the filter service makes them: with its look-ahead, a sparse fix one fix late.
        let judged = filter.judgeRecording(samples.enumerated().map { FilterInput($1.fix, seq: Int64($0 + 1)) }, state: &state)
        for due in judged {
            guard let point = due.verdict.point else { continue }
            let sample = samples[Int(due.fix.seq) - 1]
            stored.append(StoredPoint(point: point, measured: due.fix.reading))
            truthAt[point.timeMs] = (sample.truthLat, sample.truthLon)
        }
        var unsimplified = options
        unsimplified.simplifyToleranceM = 0
        let track = TrackBuilder(options: unsimplified).build(stored, device: DeviceID("score")!, sessionID: nil)
        // Both errors over the points the moving segments drew.
        let live = Dictionary(stored.map { ($0.point.timeMs, ($0.point.latitude, $0.point.longitude)) }, uniquingKeysWith: { a, _ in a })
        var liveSquares = 0.0, builtSquares = 0.0, n = 0
        for segment in track.segments where segment.kind == .moving {
            for v in segment.vertices {
                guard let t = truthAt[v.timeMs], let l = live[v.timeMs] else { continue }
                liveSquares += pow(Geodesy.distance(l.0, l.1, t.0, t.1), 2)
                builtSquares += pow(Geodesy.distance(v.latitude, v.longitude, t.0, t.1), 2)
                n += 1
            }
        }
        let s = track.statistics
        return TrackScore(liveRMSE: (liveSquares / Double(max(1, n))).squareRoot(), builtRMSE: (builtSquares / Double(max(1, n))).squareRoot(),
                          builtLengthM: s.observedDistanceM, truthLengthM: Geodesy.pathLength(truthPath),
                          segments: "\(s.movingSegments) moving, \(s.stops) stops, \(s.gaps) gaps")
    }
}
