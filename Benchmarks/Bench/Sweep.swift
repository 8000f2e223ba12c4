import FilterCore
import Foundation
import Model
import TestSupport

/// `tracker-bench sweep [seeds]`: every noise variant over many seeds, one
/// summary line each (mean and worst), for judging a filter change by more
/// than one draw of the noise. `SWEEP_DETAIL=<variant>` prints that
/// variant's seeds; `SWEEP_DUMP=<seed>` also writes that seed as a recording
/// for `tracker-bench trace`; `SWEEP_OPTIMISM=<k>` makes every fix's error k
/// times what its accuracy reports; `SWEEP_ACCURACY=<m>` makes every fix
/// report m metres (0: unknown) whatever its error; `SWEEP_ONLY=<text>` runs
/// the variants whose name contains it.
enum Sweep {
    static let variants: [NoiseVariant] = [false, true].flatMap { withSpeed -> [NoiseVariant] in
        let suffix = withSpeed ? "" : " no speed"
        return [
            NoiseVariant("default" + suffix, withSpeed: withSpeed),
            NoiseVariant("white" + suffix, correlation: 0, withSpeed: withSpeed),
            NoiseVariant("ρ 0.8" + suffix, correlation: 0.8, withSpeed: withSpeed),
            NoiseVariant("5 % jumps" + suffix, jumpProbability: 0.05, withSpeed: withSpeed),
            NoiseVariant("every 5 s" + suffix, every: 5, withSpeed: withSpeed),
            NoiseVariant("every 10 s" + suffix, every: 10, withSpeed: withSpeed),
            NoiseVariant("every 15 s" + suffix, every: 15, withSpeed: withSpeed),
            // A phone's error is correlated over ~10 s, and multipath comes in bursts of seconds.
            NoiseVariant("phone τ10s" + suffix, correlation: 0.9, jumpProbability: 0.01, withSpeed: withSpeed, jumpBurst: 3...8),
            NoiseVariant("phone τ10s 10 s" + suffix, correlation: 0.9, jumpProbability: 0.01, every: 10, withSpeed: withSpeed, jumpBurst: 3...8),
            NoiseVariant("phone τ10s 15 s" + suffix, correlation: 0.9, jumpProbability: 0.01, every: 15, withSpeed: withSpeed, jumpBurst: 3...8),
            // A source without an accuracy: every fix says 10 m (what a GPX track without `<hdop>` reads as), whatever its error.
            NoiseVariant("says 10 m" + suffix, withSpeed: withSpeed, reportedAccuracy: 10),
            // A recent phone whose accuracy is unknown (0, read as 30 m): the filter trusts its 2–10 m errors too little.
            NoiseVariant("good phone says 0" + suffix, correlation: 0.9, jumpProbability: 0.01, withSpeed: withSpeed,
                         jumpBurst: 3...8, accuracyRange: 3...15, reportedAccuracy: 0),
        ] + [1, 5, 10, 15].map { every in
            // A recent phone in the open: the same wandering error and bursts, accuracy 3–15 m.
            NoiseVariant("good phone" + (every == 1 ? "" : " \(every) s") + suffix, correlation: 0.9, jumpProbability: 0.01, every: every,
                         withSpeed: withSpeed, jumpBurst: 3...8, accuracyRange: 3...15)
        }
    }

    static func run(seeds: Int) throws {
        let truth = try Fixtures.fixes("mtv-drive-truth.jsonl")
        let environment = ProcessInfo.processInfo.environment
        // SWEEP_OPTIMISM=k: every fix's error k times what its accuracy reports.
        var optimism = 1.0
        if let text = environment["SWEEP_OPTIMISM"] {
            guard let k = Double(text), k.isFinite, k > 0 else { throw TestSupportError("SWEEP_OPTIMISM: expected a positive number, got '\(text)'") }
            optimism = k
        }
        // SWEEP_ACCURACY=m: every fix reports m whatever its error (0: unknown).
        var reported: Double?
        if let text = environment["SWEEP_ACCURACY"] {
            guard let m = Double(text), m.isFinite, m >= 0 else { throw TestSupportError("SWEEP_ACCURACY: expected a number of metres ≥ 0, got '\(text)'") }
            reported = m
        }
        let only = environment["SWEEP_ONLY"]
        if let only, !variants.contains(where: { $0.name.contains(only) }) {
            throw TestSupportError("SWEEP_ONLY: no variant's name contains '\(only)'; they are: \(variants.map(\.name).joined(separator: ", "))")
        }
        for var variant in variants where only.map(variant.name.contains) ?? true {
            variant.optimism = optimism
            if let reported { variant.reportedAccuracy = reported }
            var scores: [FilterScore] = []
            for seed in (1...UInt64(seeds)).map({ $0 * 7919 }) {
                let (samples, truthPath) = variant.apply(to: truth, seed: seed)
                let score = Quality.score(samples, truthPath: truthPath, driven: truth)
                if environment["SWEEP_DETAIL"] == variant.name {
                    print("  seed \(seed): \(score)")
                    if environment["SWEEP_DUMP"] == "\(seed)" { try Quality.dump(samples, truth: truth, to: "/tmp/sweep-\(seed).jsonl") }
                }
                scores.append(score)
            }
            let lengths = scores.map { $0.lengthError * 100 }
            func mean(_ xs: [Double]) -> Double { xs.reduce(0, +) / Double(xs.count) }
            let odometers = scores.map { $0.odometerError * 100 }
            let through = scores.jumpsLetThrough, refused = scores.cleanFixesRefused
            print(String(format: "%-24@ line %+5.1f %% |worst| %4.1f  odometer %+5.1f %% |worst| %4.1f  jumps through %4.2f (max %4.2f) %% of points  clean outliers max %4.2f %%  RMSE ratio mean %.3f max %.2f (clean points %.2f; vs all raw fixes %.2f, max %.2f); in all %d jumps through, %d clean fixes refused",
                         variant.name as NSString, mean(lengths), lengths.map(abs).max() ?? 0, mean(odometers), odometers.map(abs).max() ?? 0,
                         mean(scores.map(\.jumpsThrough)) * 100, (scores.map(\.jumpsThrough).max() ?? 0) * 100, (scores.map(\.cleanOutlierRate).max() ?? 0) * 100,
                         mean(scores.map(\.rmseRatio)), scores.map(\.rmseRatio).max() ?? 0,
                         mean(scores.map(\.cleanRMSERatio)), mean(scores.map(\.rmseRatioToAllRaw)),
                         scores.map(\.rmseRatioToAllRaw).max() ?? 0, through, refused))
        }
    }
}
