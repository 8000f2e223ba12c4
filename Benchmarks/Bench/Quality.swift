import FilterCore
import Foundation
import Model
import TestSupport

/// `tracker-bench quality`: the filter's scores on the seeded noisy truth
/// and on the real recordings.
enum Quality {
    static func run(seeds: [UInt64]) throws {
        let truth = try Fixtures.fixes("mtv-drive-truth.jsonl")
        func report(_ label: String, _ variant: NoiseVariant, seed: UInt64) {
            let (samples, truthPath) = variant.apply(to: truth, seed: seed)
            print("mtv \(label): \(score(samples, truthPath: truthPath, driven: truth))")
        }
        for seed in seeds { report("seed \(seed)", NoiseVariant("default"), seed: seed) }
        // Many devices and recordings carry no Doppler speed or course.
        for seed in seeds { report("seed \(seed) without speed", NoiseVariant("default", withSpeed: false), seed: seed) }
        // Other noise than the default, and sparse fixes (phones saving battery).
        let others = [NoiseVariant("white noise", correlation: 0), NoiseVariant("correlated noise ρ 0.8", correlation: 0.8),
                      NoiseVariant("5 % jumps", jumpProbability: 0.05)]
        for variant in others {
            for withSpeed in [true, false] {
                var v = variant
                v.withSpeed = withSpeed
                report(variant.name + (withSpeed ? "" : " without speed"), v, seed: 11)
            }
        }
        for every in [5, 10, 15] {
            for withSpeed in [true, false] {
                report("every \(every) s" + (withSpeed ? "" : " without speed"), NoiseVariant("sparse", every: every, withSpeed: withSpeed), seed: 1)
            }
        }
        // The real recordings: no truth, but known distances and real jumps.
        let core = FilterCore()
        // Each also thinned to every 5th, 10th and 15th fix (every 5–15 s where
        // the recording is 1 Hz; the train's own gaps make its steps longer).
        for name in ["city-run.jsonl", "munich-drive.jsonl", "posmo-train.jsonl", "pixel6-walk.jsonl"] {
            for every in name == "city-run.jsonl" ? [1] : [1, 5, 10, 15] {
                let fixes = try Fixtures.fixes(name).enumerated().filter { $0.offset % every == 0 }.map(\.element)
                var state = DeviceFilterState()
                var reasons: [String: Int] = [:]
                // As the service judges: look-ahead and smoothing lag included.
                let judged = core.judgeRecording(fixes.enumerated().map { FilterInput($1, seq: Int64($0 + 1)) }, state: &state)
                for due in judged { reasons[due.verdict.decision.reason, default: 0] += 1 }
                let raw = Geodesy.pathLength(fixes.map { ($0.lat, $0.lon) })
                print(String(format: "%@%@: odometer %.0f m, raw path %.0f m; ", name as NSString, every == 1 ? "" : " every \(every)th fix",
                             state.odometerM, raw) + reasons.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " "))
            }
        }
        let parked = NoiseGenerator(seed: 7).parked(lat: 48.137, lon: 11.575, hours: 8)
        for withSpeed in [true, false] {
            var state = DeviceFilterState()
            _ = core.judgeRecording(parked.enumerated().map { i, s in
                var fix = FilterInput(s.fix, seq: Int64(i + 1))
                if !withSpeed { fix.speedMps = nil }
                return fix
            }, state: &state)
            print(String(format: "parked 8 h%@: odometer %.1f m", withSpeed ? "" : " without speed", state.odometerM))
        }
    }

    /// The filter's score on noisy samples whose truth is known.
    static func score(_ samples: [NoisySample], truthPath: [(lat: Double, lon: Double)], driven: [DeviceFix]) -> FilterScore {
        FilterScore.score(core: FilterCore(), fixes: samples.map { (FilterInput($0.fix, seq: 0), $0.truthLat, $0.truthLon, $0.isJump) },
                          truthPath: truthPath, drivenLengthM: Geodesy.pathLength(driven.map { ($0.lat, $0.lon) }))
    }

    /// Noisy fixes as a recording with the truth's speed (`truthSpeed`) and `jump`, for `tracker-bench trace`.
    static func dump(_ samples: [NoisySample], truth: [DeviceFix], to path: String) throws {
        let speedAt = Dictionary(truth.map { ($0.timeMs, $0.speed ?? 0) }, uniquingKeysWith: { a, _ in a })
        var out = ""
        for s in samples {
            var line = String(decoding: JSONCoding.encode(s.fix), as: UTF8.self)
            line.removeLast()
            out += line + String(format: ",\"truthSpeed\":%.1f,\"jump\":%@}\n", speedAt[s.fix.timeMs] ?? 0, s.isJump ? "true" : "false")
        }
        try out.write(toFile: path, atomically: true, encoding: .utf8)
    }
}
