import FilterCore
import Foundation
import Model
import TestSupport

/// `tracker-bench jump-floor [seeds]`: how many sparse jumps no filter can
/// tell from honest driving. An oracle knows where the device truly was at
/// the fixes before and after, and its true velocity before: the best
/// guess of the held fix's place (the steady-vehicle bridge between them)
/// is then as good as it gets. Real driving still strays from that bridge
/// (braking, a corner), so a jump that lands no farther off than honest
/// fixes do cannot be rejected without rejecting them too. The oracle
/// rejects the 1 % (and 5 %) of clean fixes farthest off, scaled by their
/// reported accuracy; the jumps it still lets through, as a share of the
/// points, are a floor for any filter working from positions alone. It also
/// gives the odometer's floors: the Hermite way with the truth's own
/// velocities, and from the truth's positions alone (each tangent from the
/// neighbours, as a filter without Doppler has to).
enum JumpFloor {
    static func run(seeds: Int) throws {
        let truth = try Fixtures.fixes("mtv-drive-truth.jsonl")
        let frame = LocalFrame(originLat: truth[0].lat, originLon: truth[0].lon)
        let places = truth.map { frame.toLocal(lat: $0.lat, lon: $0.lon) }
        let velocities = truth.map { fix -> (Double, Double) in
            guard let speed = fix.speed, let course = fix.course else { return (0, 0) }
            return Geodesy.velocity(speed: speed, courseDeg: course)
        }
        let indexOfTime = Dictionary(truth.enumerated().map { ($0.element.timeMs, $0.offset) }, uniquingKeysWith: { a, _ in a })
        print("jumps an oracle cannot tell from driving, as a share of the points (\(seeds) seeds; mean, worst seed)")
        for variant in Sweep.variants where variant.every > 1 && !variant.withSpeed {
            let every = variant.every, dt = Double(every)
            // Where a steady vehicle from truth i, with its velocity, would be
            // halfway to truth i + 2·every (the smoother's mean for white
            // acceleration noise, known endpoints: 5/16 of the miss).
            func bridge(_ i: Int) -> (Double, Double) {
                let (p0, v0, p2) = (places[i], velocities[i], places[i + 2 * every])
                return (p0.x + v0.0 * dt + 5.0 / 16 * (p2.x - p0.x - 2 * v0.0 * dt),
                        p0.y + v0.1 * dt + 5.0 / 16 * (p2.y - p0.y - 2 * v0.1 * dt))
            }
            // How far honest driving strays from it (per axis, rms).
            let strays = stride(from: 0, to: places.count - 2 * every, by: every).map { i -> Double in
                let (bx, by) = bridge(i), p = places[i + every]
                return (pow(p.x - bx, 2) + pow(p.y - by, 2)) / 2
            }
            let stray = (strays.reduce(0, +) / Double(strays.count)).squareRoot()
            var clean: [Double] = [], jumpsBySeed: [(distances: [Double], points: Int)] = []
            for seed in (1...UInt64(seeds)).map({ $0 * 7919 }) {
                let (samples, _) = variant.apply(to: truth, seed: seed)
                var jumps: [Double] = []
                for sample in samples {
                    guard let i = indexOfTime[sample.fix.timeMs], i >= every, i + every < places.count,
                          indexOfTime[truth[i - every].timeMs] != nil else { continue }
                    let (bx, by) = bridge(i - every), (x, y) = frame.toLocal(lat: sample.fix.lat, lon: sample.fix.lon)
                    let sigma = sample.fix.acc / 1.5
                    let distance = hypot(x - bx, y - by) / (stray * stray + sigma * sigma).squareRoot()
                    if sample.isJump { jumps.append(distance) } else { clean.append(distance) }
                }
                jumpsBySeed.append((jumps, samples.count))
            }
            clean.sort()
            var line = String(format: "%-24@ honest stray %4.1f m", variant.name as NSString, stray)
            for cost in [0.01, 0.05] {
                let limit = clean[Int(Double(clean.count) * (1 - cost))]
                let through = jumpsBySeed.map { seed in Double(seed.distances.filter { $0 <= limit }.count) / Double(seed.points) * 100 }
                line += String(format: "  rejecting %.0f %% of clean fixes: %.2f %% (%.2f %%)", cost * 100,
                               through.reduce(0, +) / Double(through.count), through.max() ?? 0)
            }
            print(line)
        }
        // The odometer's side: the way between fixes `every` seconds apart
        // drawn as the Hermite curve with the truth's own positions and
        // velocities, against the way driven (the straight line when under
        // 1 m/s at either end, as the odometer does when speed says little).
        print("the truth's own Hermite way against the way driven (the odometer's floor)")
        for every in [5, 10, 15] {
            let dt = Double(every)
            var hermite = 0.0, chords = 0.0, driven = 0.0
            for i in stride(from: 0, to: places.count - every, by: every) {
                let (a, b) = (places[i], places[i + every])
                let chord = hypot(b.x - a.x, b.y - a.y)
                for k in i..<(i + every) { driven += hypot(places[k + 1].x - places[k].x, places[k + 1].y - places[k].y) }
                chords += chord
                let (va, vb) = (velocities[i], velocities[i + every])
                guard hypot(va.0, va.1) >= 1, hypot(vb.0, vb.1) >= 1 else { hermite += chord; continue }
                let curve = Odometer.hermiteLength(a: (a.x, a.y), b: (b.x, b.y), ta: (va.0 * dt, va.1 * dt), tb: (vb.0 * dt, vb.1 * dt))
                hermite += Odometer.counted(curve, chord: chord)
            }
            // Without velocities, from the positions alone: each point's tangent from its neighbours (Catmull–Rom),
            // and the same direction as fast as the way either side (the odometer's `alongTheWay`).
            var fromPositions = 0.0, alongTheWay = 0.0, drivenInside = 0.0
            // The truth at `i` as the odometer sees a point without Doppler:
            // its velocity the chord across both neighbours.
            func point(_ i: Int, velocity: Bool = true) -> DeviceFilterState.AcceptedPoint {
                var point = DeviceFilterState.AcceptedPoint(x: places[i].x, y: places[i].y, timeMs: Int64(i) * 1000, accuracyM: 0)
                if velocity {
                    let (before, after) = (places[i - every], places[i + every])
                    (point.ve, point.vn) = ((after.x - before.x) / (2 * dt), (after.y - before.y) / (2 * dt))
                }
                return point
            }
            func tangent(_ point: DeviceFilterState.AcceptedPoint) -> (Double, Double) { (point.ve! * dt, point.vn! * dt) }
            func bent(_ i: Int) -> (Double, Double) {
                let next = point(i + every, velocity: false)
                return tangent(Odometer.alongTheWay(point(i), after: point(i - every, velocity: false), before: (next.x, next.y, next.timeMs)))
            }
            for i in stride(from: every, to: places.count - 2 * every, by: every) {
                let (a, b) = (places[i], places[i + every])
                let chord = hypot(b.x - a.x, b.y - a.y)
                for k in i..<(i + every) { drivenInside += hypot(places[k + 1].x - places[k].x, places[k + 1].y - places[k].y) }
                let catmullRom = Odometer.hermiteLength(a: (a.x, a.y), b: (b.x, b.y), ta: tangent(point(i)), tb: tangent(point(i + every)))
                fromPositions += Odometer.counted(catmullRom, chord: chord)
                alongTheWay += Odometer.counted(Odometer.hermiteLength(a: (a.x, a.y), b: (b.x, b.y), ta: bent(i), tb: bent(i + every)), chord: chord)
            }
            print(String(format: "every %2d s: Hermite %+.1f %%, from the positions alone %+.1f %% (as fast as the way %+.1f %%), straight lines %+.1f %%", every,
                         (hermite / driven - 1) * 100, (fromPositions / drivenInside - 1) * 100, (alongTheWay / drivenInside - 1) * 100,
                         (chords / driven - 1) * 100))
        }
    }
}
