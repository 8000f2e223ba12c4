import FilterCore
import Foundation
import Model
import TestSupport

/// `tracker-bench breakdown VARIANT [seeds]`: where a sweep variant's length
/// error comes from. Each accepted segment is compared with the truth's path
/// between the same two fixes; the difference splits into corner cutting
/// (the truth's chord against its arc) and noise (the segment against the
/// truth's chord), grouped by what the segment spans: a jump that got
/// through, the truth slow (under 3 m/s), or ordinary driving.
enum Breakdown {
    static func run(variantName: String, seeds: Int) throws {
        guard let variant = Sweep.variants.first(where: { $0.name == variantName }) else {
            throw TestSupportError("no variant '\(variantName)'; one of: " + Sweep.variants.map(\.name).joined(separator: ", "))
        }
        let truth = try Fixtures.fixes("mtv-drive-truth.jsonl")
        let indexOfTime = Dictionary(truth.enumerated().map { ($0.element.timeMs, $0.offset) }, uniquingKeysWith: { a, _ in a })
        var arcPrefix = [0.0]
        for (a, b) in zip(truth, truth.dropFirst()) { arcPrefix.append(arcPrefix.last! + Geodesy.distance(a.lat, a.lon, b.lat, b.lon)) }
        var totals: [String: (cut: Double, noise: Double, count: Int, odometerShort: Double)] = [:]
        var truthLength = 0.0, drivenLength = 0.0
        for seed in (1...UInt64(seeds)).map({ $0 * 7919 }) {
            let (samples, truthPath) = variant.apply(to: truth, seed: seed)
            truthLength += Geodesy.pathLength(truthPath)
            drivenLength += arcPrefix.last!
            let core = FilterCore()
            var state = DeviceFilterState()
            let judged = core.judgeRecording(samples.enumerated().map { FilterInput($1.fix, seq: Int64($0)) }, state: &state)
            if ProcessInfo.processInfo.environment["BREAKDOWN_JUMPS"] != nil {
                for j in judged where samples[Int(j.fix.seq)].isJump {
                    let k = Int(j.fix.seq), s = samples[k]
                    let off = Geodesy.distance(s.fix.lat, s.fix.lon, s.truthLat, s.truthLon)
                    let nextJump = k + 1 < samples.count && samples[k + 1].isJump
                    let prevJump = k > 0 && samples[k - 1].isJump
                    // Where the published point landed, and how sharply the truth turns there.
                    let landed = j.verdict.point.map { Geodesy.distance($0.latitude, $0.longitude, s.truthLat, s.truthLon) } ?? .nan
                    var turn = Double.nan
                    if k > 0, k + 1 < samples.count {
                        let a = samples[k - 1], c = samples[k + 1]
                        let frame = LocalFrame(originLat: s.truthLat, originLon: s.truthLon)
                        let pa = frame.toLocal(lat: a.truthLat, lon: a.truthLon), pc = frame.toLocal(lat: c.truthLat, lon: c.truthLon)
                        let b1 = atan2(-pa.y, -pa.x) * 180 / .pi, b2 = atan2(pc.y, pc.x) * 180 / .pi
                        turn = abs((b2 - b1 + 540).truncatingRemainder(dividingBy: 360) - 180)
                    }
                    print(String(format: "    seed %d fix %d/%d jump %.0f m acc %.0f → %@ %.1f/%.1f landed %.0f m, truth turns %.0f°%@%@", seed, k, samples.count, off, s.fix.acc,
                                 j.verdict.decision.reason as NSString, j.verdict.decision.measured ?? .nan, j.verdict.decision.limit ?? .nan, landed, turn,
                                 prevJump ? " (after a jump)" : "", nextJump ? " (next a jump)" : ""))
                }
            }
            var previous: (point: TrackPoint, index: Int, jump: Bool)?
            var reasonsSince: [Int: String] = [:]
            for j in judged {
                guard let p = j.verdict.point else {
                    if let prev = previous { reasonsSince[prev.index, default: ""] += String(j.verdict.decision.reason.prefix(3)) + " " }
                    continue
                }
                let sample = samples[Int(j.fix.seq)]
                let index = indexOfTime[sample.fix.timeMs]!
                if let prev = previous {
                    let segment = Geodesy.distance(prev.point.latitude, prev.point.longitude, p.latitude, p.longitude)
                    let chord = Geodesy.distance(truth[prev.index].lat, truth[prev.index].lon, truth[index].lat, truth[index].lon)
                    // The truth sampled like the fixes: the yardstick's own arc between them.
                    let sampledArc = stride(from: prev.index, to: index, by: variant.every).reduce(0.0) { sum, k in
                        let next = min(k + variant.every, index)
                        return sum + Geodesy.distance(truth[k].lat, truth[k].lon, truth[next].lat, truth[next].lon)
                    }
                    let slow = (arcPrefix[index] - arcPrefix[prev.index]) / Double(max(1, index - prev.index)) < 3
                    let key = prev.jump || sample.isJump ? "jump" : index - prev.index > 2 * variant.every ? (slow ? "skip slow" : "skip") : slow ? "slow" : "driving"
                    var t = totals[key] ?? (0, 0, 0, 0)
                    t.cut += chord - sampledArc
                    t.noise += segment - chord
                    t.count += 1
                    // The odometer's step against the way the truth drove (every truth point).
                    t.odometerShort += (p.odometerM - prev.point.odometerM) - (arcPrefix[index] - arcPrefix[prev.index])
                    totals[key] = t
                    if ProcessInfo.processInfo.environment["BREAKDOWN_SEGMENTS"] != nil, chord - sampledArc < -30 || segment - chord > 30 {
                        print(String(format: "    seed %d fix %d→%d (%.0f s) %@ arc %.0f chord %.0f segment %.0f  reason before: %@", seed, prev.index, index,
                                     Double(index - prev.index), key as NSString, sampledArc, chord, segment, (reasonsSince[prev.index] ?? "") as NSString))
                    }
                }
                previous = (p, index, sample.isJump)
            }
        }
        print("\(variant.name): per seed, share of the truth's length (\(seeds) seeds)")
        for (key, t) in totals.sorted(by: { $0.key < $1.key }) {
            print(String(format: "  %-10@ segments %6d  corner cut %+6.2f %%  noise %+6.2f %%  odometer against the way driven %+6.2f %%",
                         key as NSString, t.count / seeds, t.cut / truthLength * 100, t.noise / truthLength * 100,
                         t.odometerShort / drivenLength * 100))
        }
    }
}
