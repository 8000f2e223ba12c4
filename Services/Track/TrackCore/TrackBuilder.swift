import FoundationEssentials
import Glibc
import Model

/// Builds a readable track from a session's accepted points: moving, stop
/// and gap segments, the moving ones smoothed with the look-ahead the live
/// filter cannot have, simplified, with arrows and statistics. Pure.
public struct TrackBuilder: Sendable {
    public var options: TrackOptions
    public init(options: TrackOptions = TrackOptions()) { self.options = options }

    private enum Piece { case moving(Range<Int>), stop(ClosedRange<Int>), gap(Int) }

    public func build(_ input: [StoredPoint], device: DeviceID, sessionID: String?) -> Track {
        // By time, each seq once (a stored log comes sorted already: no sort then).
        let sorted = zip(input, input.dropFirst()).allSatisfy { $0.point.timeMs <= $1.point.timeMs }
            ? input : input.sorted { ($0.point.timeMs, $0.point.seq) < ($1.point.timeMs, $1.point.seq) }
        var points: [StoredPoint] = []
        points.reserveCapacity(sorted.count)
        for p in sorted where points.last.map({ $0.point.seq != p.point.seq || $0.point.timeMs != p.point.timeMs }) ?? true {
            points.append(p)
        }
        guard let first = points.first else {
            return Track(device: device, sessionID: sessionID, segments: [], statistics: TrackStatistics(
                observedDistanceM: 0, durationSec: 0, movingSec: 0, stoppedSec: 0, maxSpeedMps: 0,
                averageMovingSpeedMps: 0, points: 0, movingSegments: 0, stops: 0, gaps: 0))
        }
        let frame = LocalFrame(originLat: first.point.latitude, originLon: first.point.longitude)
        let xy = points.map { frame.toLocal(lat: $0.point.latitude, lon: $0.point.longitude) }
        var segments: [Segment] = []
        for piece in pieces(points, xy) {
            switch piece {
            case .stop(let range): segments.append(stopSegment(points, xy, range, frame))
            case .gap(let i): segments.append(gapSegment(points[i], points[i + 1]))
            case .moving(let range): segments += movingSegments(points, range, frame)
            }
        }
        return Track(device: device, sessionID: sessionID, startMs: first.point.timeMs, endMs: points.last?.point.timeMs,
                     segments: segments, statistics: statistics(segments, points: points.count))
    }

    // MARK: Pieces

    /// Splits the points into stops (staying within the radius long
    /// enough, or a long silence that resumes nearby), gaps (a long silence
    /// that resumes far away) and the moving runs between them. Each moving
    /// run includes its neighbours' boundary points, so the line is unbroken.
    private func pieces(_ points: [StoredPoint], _ xy: [(x: Double, y: Double)]) -> [Piece] {
        let n = points.count
        let gapAfterMs = Int64(options.gapAfterSec * 1000), stopMinMs = Int64(options.stopMinSec * 1000)
        func silence(_ i: Int) -> (long: Bool, far: Bool) {
            let long = points[i + 1].point.timeMs - points[i].point.timeMs >= gapAfterMs
            return (long, hypot(xy[i + 1].x - xy[i].x, xy[i + 1].y - xy[i].y) >= options.gapMinDistanceM)
        }
        var result: [Piece] = [], movingStart = 0, i = 0
        func closeMoving(through end: Int) {
            if end > movingStart { result.append(.moving(movingStart..<(end + 1))) }
        }
        while i < n - 1 {
            let gap = silence(i)
            if gap.long && gap.far {
                closeMoving(through: i)
                result.append(.gap(i))
                movingStart = i + 1
                i += 1
                continue
            }
            if !gap.far, points[i + 1].point.timeMs - points[i].point.timeMs >= stopMinMs {
                // Silent for a stop's length and back nearby: it stood there, whatever its speed before and after
                // (a parked device sends no points: the filter holds its drift back, a phone may sleep).
                closeMoving(through: i)
                result.append(.stop(i...(i + 1)))
                movingStart = i + 1
                i += 1
                continue
            }
            // The longest run from i that stays within the radius of its own
            // centroid (a long silence nearby stays in it).
            var j = i, sumX = xy[i].x, sumY = xy[i].y
            while j + 1 < n {
                let next = silence(j)
                if next.long && next.far { break }
                let count = Double(j - i + 1)
                guard hypot(xy[j + 1].x - sumX / count, xy[j + 1].y - sumY / count) <= options.stopRadiusM || (next.long && !next.far) else { break }
                j += 1
                sumX += xy[j].x; sumY += xy[j].y
            }
            // The stop begins where the device stood, not at the last fix of its approach.
            var arrival = i
            while arrival < j, (points[arrival].point.speedMps ?? 0) >= 1 { arrival += 1 }
            if j > arrival, points[j].point.timeMs - points[arrival].point.timeMs >= stopMinMs {
                closeMoving(through: arrival)
                result.append(.stop(arrival...j))
                movingStart = j
                i = j
            } else {
                i += 1
            }
        }
        closeMoving(through: n - 1)
        return result
    }

    private func stopSegment(_ points: [StoredPoint], _ xy: [(x: Double, y: Double)], _ range: ClosedRange<Int>, _ frame: LocalFrame) -> Segment {
        // The centroid of the points: one node, however the parked device drifted.
        let count = Double(range.count)
        let cx = range.reduce(0) { $0 + xy[$1].x } / count, cy = range.reduce(0) { $0 + xy[$1].y } / count
        let (lat, lon) = frame.toGeo(x: cx, y: cy)
        let arrival = points[range.lowerBound].point.timeMs, departure = points[range.upperBound].point.timeMs
        let node = StopNode(latitude: lat, longitude: lon, arrivalMs: arrival, departureMs: departure,
                            durationSec: Double(departure - arrival) / 1000)
        return Segment(kind: .stop, startMs: arrival, endMs: departure, vertices: [Vertex(latitude: lat, longitude: lon, timeMs: arrival)],
                       distanceM: 0, stop: node)
    }

    private func gapSegment(_ a: StoredPoint, _ b: StoredPoint) -> Segment {
        Segment(kind: .gap, startMs: a.point.timeMs, endMs: b.point.timeMs,
                vertices: [Vertex(latitude: a.point.latitude, longitude: a.point.longitude, timeMs: a.point.timeMs),
                           Vertex(latitude: b.point.latitude, longitude: b.point.longitude, timeMs: b.point.timeMs)],
                distanceM: 0, gapDistanceM: Geodesy.distance(a.point.latitude, a.point.longitude, b.point.latitude, b.point.longitude))
    }

    // MARK: Moving

    /// A moving run: the live points smoothed with the measured fixes after
    /// each (the look-ahead the live filter cannot have), then split where the
    /// speed band changes for good, each part simplified with its arrows.
    private func movingSegments(_ points: [StoredPoint], _ range: Range<Int>, _ frame: LocalFrame) -> [Segment] {
        let run = Array(points[range])
        var path: [(x: Double, y: Double, speed: Double, timeMs: Int64)]
        if options.smooth, run.count > 2 {
            let smoothed = Smoother.smooth(live: run.map { live($0, frame) }, run.map { observation($0, frame) })
            path = zip(run, smoothed).map { p, s in (s.x, s.y, p.point.speedMps ?? 0, p.point.timeMs) }
        } else {
            path = run.map { p in
                let (x, y) = frame.toLocal(lat: p.point.latitude, lon: p.point.longitude)
                return (x, y, p.point.speedMps ?? 0, p.point.timeMs)
            }
        }
        // The ends stay where the neighbouring stop or gap put them: smoothing never moves a boundary.
        for end in [0, path.count - 1] {
            let (x, y) = frame.toLocal(lat: run[end].point.latitude, lon: run[end].point.longitude)
            path[end].x = x; path[end].y = y
        }
        return bandRuns(path).map { part in
            let slice = Array(path[part])
            let distance = zip(slice, slice.dropFirst()).reduce(0) { $0 + hypot($1.1.x - $1.0.x, $1.1.y - $1.0.y) }
            let seconds = Double(slice.last!.timeMs - slice.first!.timeMs) / 1000
            let kept = simplify(slice.map { ($0.x, $0.y) }, tolerance: options.simplifyToleranceM)
            let vertices = kept.map { i -> Vertex in
                let (lat, lon) = frame.toGeo(x: slice[i].x, y: slice[i].y)
                return Vertex(latitude: lat, longitude: lon, timeMs: slice[i].timeMs)
            }
            let average = seconds > 0 ? distance / seconds : 0
            return Segment(kind: .moving, startMs: slice.first!.timeMs, endMs: slice.last!.timeMs, vertices: vertices,
                           distanceM: distance, speedBand: SpeedBand(speedMps: average), averageSpeedMps: average,
                           maxSpeedMps: slice.map(\.speed).max() ?? 0,
                           arrows: arrows(kept.map { (slice[$0].x, slice[$0].y) }, frame))
        }
    }

    private func observation(_ p: StoredPoint, _ frame: LocalFrame) -> Observation {
        let m = p.measured ?? MeasuredFix(latitude: p.point.latitude, longitude: p.point.longitude, accuracyM: p.point.accuracyM)
        let (x, y) = frame.toLocal(lat: m.latitude, lon: m.longitude)
        var velocity: (Double, Double, Double)?
        if let speed = m.speedMps {
            if speed < 0.3 {
                velocity = (0, 0, 0.09)
            } else if speed >= 2, let course = m.courseDeg {
                let (east, north) = Geodesy.velocity(speed: speed, courseDeg: course)
                // Speed ±0.5 m/s along the way, course ±5° across it.
                velocity = (east, north, 0.25 + 0.008 * speed * speed)
            }
        }
        return Observation(timeMs: p.point.timeMs, x: x, y: y, r: Self.variance(accuracyM: m.accuracyM), velocity: velocity)
    }

    private func live(_ p: StoredPoint, _ frame: LocalFrame) -> LiveEstimate {
        let (x, y) = frame.toLocal(lat: p.point.latitude, lon: p.point.longitude)
        var velocity: (Double, Double)?
        if let speed = p.point.speedMps, speed < 0.3 {
            velocity = (0, 0)
        } else if let speed = p.point.speedMps, let course = p.point.courseDeg {
            velocity = Geodesy.velocity(speed: speed, courseDeg: course)
        }
        return LiveEstimate(x: x, y: y, r: Self.variance(accuracyM: p.point.accuracyM), velocity: velocity,
                            smoothed: p.measured.map { $0.speedMps == nil } ?? false)
    }

    /// Position variance per axis for an accuracy.
    static func variance(accuracyM: Double) -> Double {
        let sigma = Accuracy.sigma(accuracyM)
        return sigma * sigma
    }

    /// Index ranges of equal speed band (of the speed averaged over ±15 s);
    /// a change counts once the new band has held for 15 s (a traffic light
    /// is not a new segment).
    private func bandRuns(_ path: [(x: Double, y: Double, speed: Double, timeMs: Int64)]) -> [ClosedRange<Int>] {
        guard path.count > 2 else { return [0...max(0, path.count - 1)] }
        // The averaged band at each point, with a sliding window over time.
        var bands: [SpeedBand] = [], low = 0, high = 0, sum = 0.0
        for i in path.indices {
            while high < path.count, path[high].timeMs - path[i].timeMs <= 15_000 { sum += path[high].speed; high += 1 }
            while path[i].timeMs - path[low].timeMs > 15_000 { sum -= path[low].speed; low += 1 }
            bands.append(SpeedBand(speedMps: sum / Double(high - low)))
        }
        var runs: [ClosedRange<Int>] = [], start = 0, band = bands[0], candidate: Int?
        for i in 1..<path.count {
            if bands[i] == band { candidate = nil; continue }
            let since = candidate ?? i
            candidate = since
            if path[i].timeMs - path[since].timeMs >= 15_000, since > start {
                runs.append(start...since)
                start = since
                band = bands[i]
                candidate = nil
            }
        }
        runs.append(start...(path.count - 1))
        return runs
    }

    /// Douglas–Peucker, iterative: the indices kept; the ends always are.
    public func simplify(_ line: [(x: Double, y: Double)], tolerance: Double) -> [Int] {
        guard line.count > 2, tolerance > 0 else { return Array(line.indices) }
        var keep = [Bool](repeating: false, count: line.count)
        keep[0] = true; keep[line.count - 1] = true
        var stack = [(0, line.count - 1)]
        while let (a, b) = stack.popLast() {
            guard b > a + 1 else { continue }
            let (ax, ay) = line[a], (bx, by) = line[b]
            let dx = bx - ax, dy = by - ay, length2 = dx * dx + dy * dy
            var farthest = a, distance = 0.0
            for i in (a + 1)..<b {
                let px = line[i].x - ax, py = line[i].y - ay
                let d: Double
                if length2 == 0 { d = hypot(px, py) } else {
                    let t = max(0, min(1, (px * dx + py * dy) / length2))
                    d = hypot(px - t * dx, py - t * dy)
                }
                if d > distance { distance = d; farthest = i }
            }
            if distance > tolerance {
                keep[farthest] = true
                stack.append((a, farthest))
                stack.append((farthest, b))
            }
        }
        return keep.indices.filter { keep[$0] }
    }

    /// An arrow every `arrowEveryM` along the line, pointing the way it goes.
    private func arrows(_ line: [(x: Double, y: Double)], _ frame: LocalFrame) -> [Arrow]? {
        guard options.arrowEveryM > 0, line.count > 1 else { return nil }
        var result: [Arrow] = [], next = options.arrowEveryM / 2, travelled = 0.0
        for (a, b) in zip(line, line.dropFirst()) {
            let leg = hypot(b.x - a.x, b.y - a.y)
            guard leg > 0 else { continue }
            while next <= travelled + leg {
                let t = (next - travelled) / leg
                let (lat, lon) = frame.toGeo(x: a.x + t * (b.x - a.x), y: a.y + t * (b.y - a.y))
                var bearing = atan2(b.x - a.x, b.y - a.y) * 180 / .pi
                if bearing < 0 { bearing += 360 }
                result.append(Arrow(latitude: lat, longitude: lon, bearingDeg: bearing))
                next += options.arrowEveryM
            }
            travelled += leg
        }
        return result
    }

    // MARK: Statistics

    private func statistics(_ segments: [Segment], points: Int) -> TrackStatistics {
        let moving = segments.filter { $0.kind == .moving }, stops = segments.filter { $0.kind == .stop }
        let distance = moving.reduce(0) { $0 + $1.distanceM }
        let movingSec = moving.reduce(0) { $0 + Double($1.endMs - $1.startMs) / 1000 }
        let duration = Double((segments.last?.endMs ?? 0) - (segments.first?.startMs ?? 0)) / 1000
        return TrackStatistics(observedDistanceM: distance, durationSec: duration, movingSec: movingSec,
                               stoppedSec: stops.reduce(0) { $0 + ($1.stop?.durationSec ?? 0) },
                               maxSpeedMps: moving.compactMap(\.maxSpeedMps).max() ?? 0,
                               averageMovingSpeedMps: movingSec > 0 ? distance / movingSec : 0, points: points,
                               movingSegments: moving.count, stops: stops.count, gaps: segments.filter { $0.kind == .gap }.count)
    }
}
