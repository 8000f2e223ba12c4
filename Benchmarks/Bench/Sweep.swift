import FilterCore
import Foundation
import Model
import TestSupport

/// `tracker-bench sweep [seeds]`: every noise variant over many seeds, one
/// summary line each (mean and worst), for judging a filter change by more
/// than one draw of the noise.
enum Sweep {
    struct Variant {
        var name: String
        var correlation = 0.3
        var jumps = 0.02
        var every = 1
        var speed = true
    }

    static let variants: [Variant] = [false, true].flatMap { speed -> [Variant] in
        let suffix = speed ? "" : " no speed"
        return [
            Variant(name: "default" + suffix, speed: speed),
            Variant(name: "white" + suffix, correlation: 0, speed: speed),
            Variant(name: "ρ 0.8" + suffix, correlation: 0.8, speed: speed),
            Variant(name: "5 % jumps" + suffix, jumps: 0.05, speed: speed),
            Variant(name: "every 5 s" + suffix, every: 5, speed: speed),
            Variant(name: "every 15 s" + suffix, every: 15, speed: speed),
        ]
    }

    static func run(seeds: Int) throws {
        let truth = try Fixtures.fixes("mtv-drive-truth.jsonl")
        let core = FilterCore()
        for variant in variants {
            let sampledTruth = truth.enumerated().filter { $0.offset % variant.every == 0 }.map { (lat: $0.element.lat, lon: $0.element.lon) }
            var scores: [FilterScore] = []
            for seed in 1...UInt64(seeds) {
                var generator = NoiseGenerator(seed: seed * 7919)
                generator.correlation = variant.correlation
                generator.jumpProbability = variant.jumps
                let noisy = generator.apply(to: truth).enumerated()
                    .filter { $0.offset % variant.every == 0 }
                    .map { _, s -> NoisySample in
                        var s = s
                        if !variant.speed { s.fix.speed = nil; s.fix.course = nil }
                        return s
                    }
                let score = FilterScore.score(core: core, fixes: noisy.map(Quality.input), truthPath: sampledTruth)
                if ProcessInfo.processInfo.environment["SWEEP_DETAIL"] == variant.name {
                    print("  seed \(seed * 7919): \(score)")
                    if ProcessInfo.processInfo.environment["SWEEP_DUMP"] == "\(seed * 7919)" {
                        try Quality.dump(noisy, truth: truth, to: "/tmp/sweep-\(seed * 7919).jsonl")
                    }
                }
                scores.append(score)
            }
            let lengths = scores.map { $0.lengthError * 100 }
            func mean(_ xs: [Double]) -> Double { xs.reduce(0, +) / Double(xs.count) }
            print(String(format: "%-22@ length mean %+5.1f %% |worst| %4.1f %%  jumps min %5.1f %%  clean outliers max %4.2f %%  RMSE ratio mean %.2f max %.2f",
                         variant.name as NSString, mean(lengths), lengths.map(abs).max() ?? 0,
                         (scores.map(\.jumpRejection).min() ?? 0) * 100, (scores.map(\.cleanOutlierRate).max() ?? 0) * 100,
                         mean(scores.map(\.rmseRatio)), scores.map(\.rmseRatio).max() ?? 0))
        }
    }
}
