import FoundationEssentials
import Glibc
import Model

/// The active route (`setActiveRoute`): a polyline in a flat frame, so the
/// distance from a point to it is plane geometry.
public struct ActiveRoute: Sendable {
    public let points: [Spot]
    private let frame: LocalFrame
    private let xy: [(x: Double, y: Double)]

    public init(_ points: [(latitude: Double, longitude: Double)]) {
        self.points = points.map { Spot(timeMs: 0, latitude: $0.latitude, longitude: $0.longitude) }
        frame = LocalFrame(originLat: points.first?.latitude ?? 0, originLon: points.first?.longitude ?? 0)
        xy = points.map { [frame] in frame.toLocal(lat: $0.latitude, lon: $0.longitude) }
    }

    /// The distance from the point to the route and the segment nearest it.
    /// Looks around `near` first (a device follows its route), then everywhere.
    public func distance(_ latitude: Double, _ longitude: Double, near: Int) -> (metres: Double, segment: Int) {
        let p = frame.toLocal(lat: latitude, lon: longitude)
        guard xy.count > 1 else { return (xy.first.map { hypot($0.x - p.x, $0.y - p.y) } ?? .infinity, 0) }
        // A stored progress that outlived its route must not make an empty (trapping) window.
        let near = min(max(near, 0), xy.count - 2)
        let window = max(0, near - 16)...min(xy.count - 2, near + 48)
        var best = nearest(p, in: window)
        if best.metres > 500, window.count < xy.count - 1 {
            let everywhere = nearest(p, in: 0...(xy.count - 2))
            if everywhere.metres < best.metres { best = everywhere }
        }
        return best
    }

    private func nearest(_ p: (x: Double, y: Double), in segments: ClosedRange<Int>) -> (metres: Double, segment: Int) {
        var best = (metres: Double.infinity, segment: segments.lowerBound)
        for i in segments {
            let a = xy[i], b = xy[i + 1]
            let dx = b.x - a.x, dy = b.y - a.y
            let length2 = dx * dx + dy * dy
            let t = length2 > 0 ? min(1, max(0, ((p.x - a.x) * dx + (p.y - a.y) * dy) / length2)) : 0
            let d = hypot(a.x + t * dx - p.x, a.y + t * dy - p.y)
            if d < best.metres { best = (d, i) }
        }
        return best
    }
}

/// How a device follows its route.
public struct RouteProgress: Codable, Sendable, Equatable {
    public var offRoute = false
    /// Consecutive points beyond the corridor (or back inside it, while off).
    public var run = 0
    public var segment = 0
    public init() {}
}

public struct RouteRules: Sendable, Equatable {
    /// Half the corridor's width, metres; a point's accuracy (up to as much again) is allowed for.
    public var corridorM: Double = 50
    /// Consecutive points beyond the corridor before `offRoute` (a wrong turn, not one GPS spike).
    public var offAfter = 3
    /// Consecutive points back inside before `onRoute`.
    public var onAfter = 2
    public init() {}
}

public enum RouteChange: Sendable, Equatable {
    case off(distanceM: Double)
    case on(distanceM: Double)
}

public struct RouteWatch: Sendable {
    public var rules: RouteRules
    public init(rules: RouteRules = RouteRules()) { self.rules = rules }

    public func handle(point: TrackPoint, route: ActiveRoute, progress: inout RouteProgress) -> RouteChange? {
        let (d, segment) = route.distance(point.latitude, point.longitude, near: progress.segment)
        progress.segment = segment
        let beyond = d > rules.corridorM + min(point.accuracyM, rules.corridorM)
        if beyond != progress.offRoute { progress.run += 1 } else { progress.run = 0 }
        if !progress.offRoute, progress.run >= rules.offAfter {
            progress.offRoute = true; progress.run = 0
            return .off(distanceM: d)
        }
        if progress.offRoute, progress.run >= rules.onAfter {
            progress.offRoute = false; progress.run = 0
            return .on(distanceM: d)
        }
        return nil
    }
}
