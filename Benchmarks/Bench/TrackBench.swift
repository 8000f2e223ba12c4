import FilterCore
import Foundation
import Model
import TestSupport
import TrackCore

/// `tracker-bench track`: the built track's quality on every noise variant
/// of the sweep, and how long building takes at 100k and 1M points.
enum TrackBench {
    static func run(seeds: Int) throws {
        for count in [100_000, 1_000_000] { buildTime(points: count) }
        for variant in Sweep.variants {
            var scores: [TrackScore] = []
            for seed in (1...UInt64(seeds)).map({ $0 * 7919 }) { scores.append(try TrackScore.score(variant, seed: seed)) }
            let ratios = scores.map(\.rmseRatio), lengths = scores.map { $0.lengthError * 100 }
            print(String(format: "%-22@ RMSE built/live mean %.2f max %.2f; length mean %+5.1f %% |worst| %4.1f %%  (e.g. %@)",
                         variant.name as NSString, ratios.reduce(0, +) / Double(ratios.count), ratios.max() ?? 0,
                         lengths.reduce(0, +) / Double(lengths.count), lengths.map(abs).max() ?? 0, scores[0].segments as NSString))
        }
    }

    /// A day of driving at 1 Hz with a stop every 20 minutes and noisy fixes:
    /// the time to build its track (smoothing, stops, simplification, arrows).
    static func buildTime(points count: Int) {
        let frame = LocalFrame(originLat: 48.1, originLon: 11.5)
        var rng = SeededRandom(seed: 2)
        var x = 0.0, y = 0.0, heading = 0.0
        let points = (0..<count).map { i -> StoredPoint in
            let stopped = i % 1_200 >= 1_080  // two minutes of every twenty
            if !stopped {
                heading += rng.gaussian() * 0.05
                x += 12 * sin(heading); y += 12 * cos(heading)
            }
            let (lat, lon) = frame.toGeo(x: x, y: y)
            let (mlat, mlon) = frame.toGeo(x: x + rng.gaussian() * 5, y: y + rng.gaussian() * 5)
            return StoredPoint(point: TrackPoint(seq: Int64(i + 1), sessionID: "s", timeMs: Int64(i) * 1000, latitude: lat, longitude: lon,
                                                 accuracyM: 8, speedMps: stopped ? 0 : 12, odometerM: 0),
                               measured: MeasuredFix(latitude: mlat, longitude: mlon, accuracyM: 8, speedMps: stopped ? 0 : 12,
                                                     courseDeg: stopped ? nil : (heading * 180 / .pi).truncatingRemainder(dividingBy: 360) + 360))
        }
        let start = ContinuousClock.now
        let track = TrackBuilder().build(points, device: DeviceID("bench")!, sessionID: "s")
        let seconds = (ContinuousClock.now - start).seconds
        print(String(format: "buildTrack over %d points: %.3f s on one core (%.0f points/s); %d segments, %d stops",
                     count, seconds, Double(count) / seconds, track.segments.count, track.statistics.stops))
    }

    /// `tracker-bench picture FILE.svg`: the noisy survey drive through the
    /// filter, with twelve minutes dark in the middle, built and drawn.
    static func picture(to path: String) throws {
        let truth = try Fixtures.fixes("mtv-drive-truth.jsonl")
        let samples = NoiseGenerator(seed: 1).apply(to: truth)
        let filter = FilterCore()
        var state = DeviceFilterState(), stored: [StoredPoint] = []
        let darkFrom = truth[0].timeMs + 1_000_000, darkTo = darkFrom + 720_000
        for (i, sample) in samples.enumerated() where !(darkFrom..<darkTo).contains(sample.fix.timeMs) {
            let input = FilterInput(sample.fix, seq: Int64(i + 1), sessionID: "demo")
            guard let point = filter.judge(input, state: &state).point else { continue }
            stored.append(StoredPoint(point: point, measured: MeasuredFix(latitude: input.latitude, longitude: input.longitude,
                                                                         accuracyM: input.accuracyM, speedMps: input.speedMps, courseDeg: input.courseDeg)))
        }
        var options = TrackOptions()
        options.stopMinSec = 60
        let track = TrackBuilder(options: options).build(stored, device: DeviceID("survey")!, sessionID: "demo")
        try TrackPicture.svg(track).write(toFile: path, atomically: true, encoding: .utf8)
        print("wrote \(path): \(track.segments.count) segments, \(track.statistics.stops) stops, \(track.statistics.gaps) gaps")
    }
}
