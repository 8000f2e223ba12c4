import FilterCore
import Foundation
import Model
import TestSupport

/// `tracker-bench quality`: the filter's scores on the seeded noisy truth.
enum Quality {
    static func run(seeds: [UInt64]) throws {
        let truth = try Fixtures.fixes("mtv-drive-truth.jsonl")
        let truthPath = truth.map { (lat: $0.lat, lon: $0.lon) }
        let core = FilterCore()
        for seed in seeds {
            let noisy = NoiseGenerator(seed: seed).apply(to: truth)
            let score = FilterScore.score(core: core, fixes: noisy.map(Self.input), truthPath: truthPath)
            print("mtv seed \(seed): \(score)")
        }
        if let debugSeed = ProcessInfo.processInfo.environment["DEBUG_SEED"].flatMap(UInt64.init) {
            var state = DeviceFilterState()
            var previousT = 0.0
            for s in NoiseGenerator(seed: debugSeed).apply(to: truth) {
                let before = core.estimate(state)
                let v = core.judge(input(s, seq: 0), state: &state)
                if s.isJump && v.point != nil {
                    let off = Geodesy.distance(s.fix.lat, s.fix.lon, s.truthLat, s.truthLon)
                    print(String(format: "JUMP ACCEPTED t=%.0f dt=%.0f off=%.0f acc=%.0f estAcc=%.0f speed=%.1f", s.fix.t, s.fix.t - previousT, off, s.fix.acc, before?.accuracyM ?? -1, s.fix.speed ?? -1))
                }
                previousT = s.fix.t
            }
        }
        let parked = NoiseGenerator(seed: 7).parked(lat: 48.137, lon: 11.575, hours: 8)
        var state = DeviceFilterState()
        for (i, s) in parked.enumerated() { _ = core.judge(input(s, seq: Int64(i + 1)), state: &state) }
        print(String(format: "parked 8 h: odometer %.1f m", state.odometerM))
    }

    static func input(_ s: NoisySample) -> (fix: FilterInput, truthLat: Double, truthLon: Double, isJump: Bool) {
        (input(s, seq: 0), s.truthLat, s.truthLon, s.isJump)
    }

    static func input(_ s: NoisySample, seq: Int64) -> FilterInput {
        FilterInput(seq: seq, sessionID: nil, timeMs: s.fix.timeMs, latitude: s.fix.lat, longitude: s.fix.lon,
                    accuracyM: s.fix.acc, speedMps: s.fix.speed, courseDeg: s.fix.course)
    }
}
