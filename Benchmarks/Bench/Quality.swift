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
        // Many devices and recordings carry no Doppler speed or course.
        for seed in seeds {
            let noisy = NoiseGenerator(seed: seed).apply(to: truth).map { s -> NoisySample in
                var s = s; s.fix.speed = nil; s.fix.course = nil; return s
            }
            let score = FilterScore.score(core: core, fixes: noisy.map(Self.input), truthPath: truthPath)
            print("mtv seed \(seed) without speed: \(score)")
        }
        // Other noise than the default: white, strongly correlated, many jumps.
        for (label, correlation, jumps) in [("white noise", 0.0, 0.02), ("correlated noise ρ 0.8", 0.8, 0.02), ("5 % jumps", 0.3, 0.05)] {
            for dropSpeed in [false, true] {
                var generator = NoiseGenerator(seed: 11)
                generator.correlation = correlation
                generator.jumpProbability = jumps
                let noisy = generator.apply(to: truth).map { s -> NoisySample in
                    var s = s
                    if dropSpeed { s.fix.speed = nil; s.fix.course = nil }
                    return s
                }
                let score = FilterScore.score(core: core, fixes: noisy.map(Self.input), truthPath: truthPath)
                print("mtv \(label)\(dropSpeed ? " without speed" : ""): \(score)")
            }
        }
        // Sparse fixes, as from phones saving battery: every 5th and every 15th
        // second. The yardstick is the truth sampled the same way.
        for every in [5, 15] {
            for dropSpeed in [false, true] {
                let noisy = NoiseGenerator(seed: 1).apply(to: truth).enumerated()
                    .filter { $0.offset % every == 0 }
                    .map { _, s -> NoisySample in
                        var s = s
                        if dropSpeed { s.fix.speed = nil; s.fix.course = nil }
                        return s
                    }
                let sampledTruth = truth.enumerated().filter { $0.offset % every == 0 }.map { (lat: $0.element.lat, lon: $0.element.lon) }
                let score = FilterScore.score(core: core, fixes: noisy.map(Self.input), truthPath: sampledTruth)
                print("mtv every \(every) s\(dropSpeed ? " without speed" : ""): \(score)")
            }
        }
        // The real recordings: no truth, but known distances and real jumps.
        for name in ["city-run.jsonl", "munich-drive.jsonl", "posmo-train.jsonl", "pixel6-walk.jsonl"] {
            let fixes = try Fixtures.fixes(name)
            var state = DeviceFilterState()
            var reasons: [String: Int] = [:]
            for (i, f) in fixes.enumerated() {
                let v = core.judge(FilterInput(seq: Int64(i + 1), sessionID: nil, timeMs: f.timeMs, latitude: f.lat, longitude: f.lon,
                                               accuracyM: f.acc, speedMps: f.speed.flatMap { $0 < 0 ? nil : $0 },
                                               courseDeg: f.course.flatMap { $0 < 0 ? nil : $0 }), state: &state)
                reasons[v.decision.reason, default: 0] += 1
            }
            let raw = Geodesy.pathLength(fixes.map { ($0.lat, $0.lon) })
            print(String(format: "%@: odometer %.0f m, raw path %.0f m; ", name as NSString, state.odometerM, raw)
                  + reasons.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " "))
        }
        if let dumpSeed = ProcessInfo.processInfo.environment["DUMP_SEED"].flatMap(UInt64.init) {
            let noSpeed = ProcessInfo.processInfo.environment["NOSPEED"] != nil
            let samples = NoiseGenerator(seed: dumpSeed).apply(to: truth).map { s -> NoisySample in
                var s = s
                if noSpeed { s.fix.speed = nil; s.fix.course = nil }
                return s
            }
            try dump(samples, truth: truth, to: "/tmp/mtv-seed\(dumpSeed)\(noSpeed ? "-nospeed" : "").jsonl")
        }
        if let debugSeed = ProcessInfo.processInfo.environment["DEBUG_SEED"].flatMap(UInt64.init) {
            var state = DeviceFilterState()
            var previousT = 0.0
            var lastPoint: (Double, Double)?
            var lengthStopped = 0.0, lengthMoving = 0.0, truthMoving = 0.0, lastTruth: (Double, Double)?
            let speedAt = Dictionary(truth.map { ($0.timeMs, $0.speed ?? 0) }, uniquingKeysWith: { a, _ in a })
            var reasons: [String: Int] = [:]
            let noSpeed = ProcessInfo.processInfo.environment["NOSPEED"] != nil
            for var s in NoiseGenerator(seed: debugSeed).apply(to: truth) {
                if noSpeed { s.fix.speed = nil; s.fix.course = nil }
                defer {
                    if let lt = lastTruth, (speedAt[s.fix.timeMs] ?? 0) >= 0.5 { truthMoving += Geodesy.distance(lt.0, lt.1, s.truthLat, s.truthLon) }
                    lastTruth = (s.truthLat, s.truthLon)
                }
                let before = core.estimate(state)
                let v = core.judge(input(s, seq: 0), state: &state)
                if let p = v.point {
                    if let lp = lastPoint {
                        let d = Geodesy.distance(lp.0, lp.1, p.latitude, p.longitude)
                        if (speedAt[s.fix.timeMs] ?? 0) < 0.5 {
                            lengthStopped += d
                            if ProcessInfo.processInfo.environment["DEBUG_STOPS"] != nil {
                                print(String(format: "stopped-step t=%.0f %.1f m acc %.0f", s.fix.t - truth[0].t, d, s.fix.acc))
                            }
                        } else { lengthMoving += d }
                    }
                    lastPoint = (p.latitude, p.longitude)
                }
                if !s.isJump { reasons[v.decision.reason + ((speedAt[s.fix.timeMs] ?? 0) < 0.5 ? "@stop" : "@move"), default: 0] += 1 }
                if s.isJump && v.point != nil {
                    let off = Geodesy.distance(s.fix.lat, s.fix.lon, s.truthLat, s.truthLon)
                    print(String(format: "JUMP ACCEPTED t=%.0f dt=%.0f off=%.0f acc=%.0f estAcc=%.0f speed=%.1f", s.fix.t, s.fix.t - previousT, off, s.fix.acc, before?.accuracyM ?? -1, s.fix.speed ?? -1))
                }
                previousT = s.fix.t
            }
            print(String(format: "length while truth stopped %.0f m, while moving %.0f m (truth moving %.0f m)", lengthStopped, lengthMoving, truthMoving))
            print(reasons.sorted { $0.key < $1.key })
        }
        let parked = NoiseGenerator(seed: 7).parked(lat: 48.137, lon: 11.575, hours: 8)
        var state = DeviceFilterState()
        for (i, s) in parked.enumerated() { _ = core.judge(input(s, seq: Int64(i + 1)), state: &state) }
        print(String(format: "parked 8 h: odometer %.1f m", state.odometerM))
        state = DeviceFilterState()
        let debugParked = ProcessInfo.processInfo.environment["DEBUG_PARKED"] != nil
        for (i, s) in parked.enumerated() {
            var f = input(s, seq: Int64(i + 1)); f.speedMps = nil
            let v = core.judge(f, state: &state)
            if debugParked, v.decision.reason != "stationary_drift" || (v.decision.measured ?? 0) > 1.5 * (v.decision.limit ?? 1) {
                print(String(format: "parked %5d %@ measured %.1f limit %.1f odo %.1f", i, v.decision.reason as NSString,
                             v.decision.measured ?? .nan, v.decision.limit ?? .nan, state.odometerM))
            }
        }
        print(String(format: "parked 8 h without speed: odometer %.1f m", state.odometerM))
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

    static func input(_ s: NoisySample) -> (fix: FilterInput, truthLat: Double, truthLon: Double, isJump: Bool) {
        (input(s, seq: 0), s.truthLat, s.truthLon, s.isJump)
    }

    static func input(_ s: NoisySample, seq: Int64) -> FilterInput {
        FilterInput(seq: seq, sessionID: nil, timeMs: s.fix.timeMs, latitude: s.fix.lat, longitude: s.fix.lon,
                    accuracyM: s.fix.acc, speedMps: s.fix.speed, courseDeg: s.fix.course)
    }
}
