import FoundationEssentials
import Model

/// Where and when a device was, for a crossing's interpolation.
public struct Spot: Codable, Sendable, Equatable {
    public var timeMs: Int64
    public var latitude: Double
    public var longitude: Double
    public var speedMps: Double?

    public init(_ point: TrackPoint) {
        timeMs = point.timeMs; latitude = point.latitude; longitude = point.longitude; speedMps = point.speedMps
    }
    public init(timeMs: Int64, latitude: Double, longitude: Double, speedMps: Double? = nil) {
        self.timeMs = timeMs; self.latitude = latitude; self.longitude = longitude; self.speedMps = speedMps
    }
}

/// A device inside one fence: since when, and what it still owes.
public struct FenceVisit: Codable, Sendable, Equatable {
    public var enteredMs: Int64
    /// When `geofenceDwell` is due (entry + dwellAfterMs); nil once fired or without dwell.
    public var dwellDueMs: Int64?
    /// The newest point inside the radius.
    public var lastInside: Spot
    /// The first point beyond the radius since then: the exit happened between the two.
    public var beyond: Spot?
}

/// The geofence rules (the motion service's settings).
public struct GeofenceRules: Sendable, Equatable {
    /// Exit needs the point this far beyond the radius, or twice its
    /// accuracy if larger (up to the radius): a phone's accuracy is a 68 %
    /// radius, so a parked device's fixes pass it now and then, and one
    /// parked at the edge must not flap.
    public var minHysteresisM: Double = 5
    public init() {}
}

/// What a point means for the fences: crossings, in time order.
public struct Geofencing: Sendable {
    public var rules: GeofenceRules
    public init(rules: GeofenceRules = GeofenceRules()) { self.rules = rules }

    /// A visit's key: fleet fences and a device's own may share an id.
    public static func key(_ id: String, fleet: Bool) -> String { fleet ? "_fleet/" + id : id }

    /// Checks `point` (coming from `previous`) against the device's and the fleet's fences.
    public func handle(point: TrackPoint, previous: TrackPoint?, visits: inout FenceVisits,
                       own: FenceIndex?, fleet: FenceIndex?) -> [Crossing] {
        var crossings: [Crossing] = []
        let from = previous ?? point
        own?.forEachCandidate(from.latitude, from.longitude, point.latitude, point.longitude) { fence in
            check(fence, fleet: false, point: point, previous: previous, visits: &visits, into: &crossings)
        }
        fleet?.forEachCandidate(from.latitude, from.longitude, point.latitude, point.longitude) { fence in
            check(fence, fleet: true, point: point, previous: previous, visits: &visits, into: &crossings)
        }
        guard !visits.isEmpty else { return crossings.count > 1 ? crossings.sorted { $0.timeMs < $1.timeMs } : crossings }
        // Visits of fences the point's box did not reach (it left them far behind).
        for (key, visit) in visits where visit.lastInside.timeMs < point.timeMs && visit.beyond?.timeMs != point.timeMs {
            let isFleet = key.hasPrefix("_fleet/")
            let id = isFleet ? String(key.dropFirst(7)) : key
            guard let fence = (isFleet ? fleet : own)?.fence(id) else { visits[key] = nil; continue }  // removed
            if fence.distance(point.latitude, point.longitude) <= fence.fence.radiusM { continue }  // checked above
            check(fence, fleet: isFleet, point: point, previous: previous, visits: &visits, into: &crossings)
        }
        // Dwell: due by this point's time and still inside.
        crossings += dwells(until: point.timeMs, visits: &visits, at: Spot(point))
        return crossings.count > 1 ? crossings.sorted { $0.timeMs < $1.timeMs } : crossings
    }

    /// The clock's turn while no point comes: dwells due by `nowMs` (the
    /// device's time carried on) fire at their due time — the device was
    /// inside at its last point and nothing has said it left.
    public func dwells(until nowMs: Int64, visits: inout FenceVisits, at place: Spot? = nil) -> [Crossing] {
        var crossings: [Crossing] = []
        for (key, var visit) in visits {
            guard let due = visit.dwellDueMs, due <= nowMs else { continue }
            visit.dwellDueMs = nil
            visits[key] = visit
            let isFleet = key.hasPrefix("_fleet/")
            let spot = place ?? visit.lastInside
            crossings.append(Crossing(geofenceID: isFleet ? String(key.dropFirst(7)) : key, kind: .dwell, timeMs: due,
                                      latitude: spot.latitude, longitude: spot.longitude, fleet: isFleet ? true : nil))
        }
        return crossings.count > 1 ? crossings.sorted { $0.timeMs < $1.timeMs } : crossings
    }

    /// A fence armed (or re-armed) around the device's last point enters at once, at `atMs`.
    public func arm(_ fence: Geofence, at point: TrackPoint?, atMs: Int64, visits: inout FenceVisits) -> Crossing? {
        let key = Self.key(fence.id, fleet: fence.fleet == true)
        visits[key] = nil
        guard let point, IndexedFence(fence, fleet: fence.fleet == true).distance(point.latitude, point.longitude) <= fence.radiusM else { return nil }
        visits[key] = FenceVisit(enteredMs: atMs, dwellDueMs: fence.dwellAfterMs.map { atMs + $0 }, lastInside: Spot(point))
        return Crossing(geofenceID: fence.id, kind: .enter, timeMs: atMs, latitude: point.latitude, longitude: point.longitude,
                        fleet: fence.fleet == true ? true : nil)
    }

    private func check(_ indexed: IndexedFence, fleet isFleet: Bool, point: TrackPoint, previous: TrackPoint?,
                       visits: inout FenceVisits, into crossings: inout [Crossing]) {
        let fence = indexed.fence
        let key = indexed.visitKey
        let d = indexed.distance(point.latitude, point.longitude)
        let flag: Bool? = isFleet ? true : nil
        if var visit = visits[key] {
            if d <= fence.radiusM {
                visit.lastInside = Spot(point)
                visit.beyond = nil
                visits[key] = visit
                return
            }
            if visit.beyond == nil { visit.beyond = Spot(point) }
            let hysteresis = max(rules.minHysteresisM, min(2 * point.accuracyM, fence.radiusM))
            guard d > fence.radiusM + hysteresis else { visits[key] = visit; return }
            // Out for sure: it left between the last point inside and the first beyond.
            let exit = crossing(indexed, from: visit.lastInside, to: visit.beyond!, leaving: true)
            if let due = visit.dwellDueMs, due <= exit.timeMs {
                crossings.append(Crossing(geofenceID: fence.id, kind: .dwell, timeMs: due, latitude: visit.lastInside.latitude,
                                          longitude: visit.lastInside.longitude, fleet: flag))
            }
            visits[key] = nil
            crossings.append(Crossing(geofenceID: fence.id, kind: .exit, timeMs: exit.timeMs, latitude: exit.latitude,
                                      longitude: exit.longitude, fleet: flag))
            return
        }
        if d <= fence.radiusM {
            // In: since the boundary between the previous point and this one.
            var entry = Spot(point)
            if let previous, indexed.distance(previous.latitude, previous.longitude) > fence.radiusM {
                entry = crossing(indexed, from: Spot(previous), to: Spot(point), leaving: false)
            }
            visits[key] = FenceVisit(enteredMs: entry.timeMs, dwellDueMs: fence.dwellAfterMs.map { entry.timeMs + $0 },
                                     lastInside: Spot(point))
            crossings.append(Crossing(geofenceID: fence.id, kind: .enter, timeMs: entry.timeMs, latitude: entry.latitude,
                                      longitude: entry.longitude, fleet: flag))
            return
        }
        // Both ends outside: did the line between them pass through?
        guard let previous, let (enter, exit) = passage(indexed, from: Spot(previous), to: Spot(point)) else { return }
        crossings.append(Crossing(geofenceID: fence.id, kind: .enter, timeMs: enter.timeMs, latitude: enter.latitude,
                                  longitude: enter.longitude, interpolated: true, fleet: flag))
        if let dwell = fence.dwellAfterMs, enter.timeMs + dwell <= exit.timeMs {
            crossings.append(Crossing(geofenceID: fence.id, kind: .dwell, timeMs: enter.timeMs + dwell, latitude: enter.latitude,
                                      longitude: enter.longitude, interpolated: true, fleet: flag))
        }
        crossings.append(Crossing(geofenceID: fence.id, kind: .exit, timeMs: exit.timeMs, latitude: exit.latitude,
                                  longitude: exit.longitude, interpolated: true, fleet: flag))
    }

    /// Where the straight line from `a` to `b` meets the circle: the entry
    /// (the first meeting) or the exit (the last), with its time.
    private func crossing(_ fence: IndexedFence, from a: Spot, to b: Spot, leaving: Bool) -> Spot {
        let roots = intersections(fence, a, b)
        let t = leaving ? (roots?.1 ?? 1) : (roots?.0 ?? 1)
        return interpolate(a, b, min(1, max(0, t)))
    }

    private func passage(_ fence: IndexedFence, from a: Spot, to b: Spot) -> (Spot, Spot)? {
        guard let (t0, t1) = intersections(fence, a, b), t0 > 0, t1 < 1, t1 > t0 else { return nil }
        return (interpolate(a, b, t0), interpolate(a, b, t1))
    }

    /// The parameters (0 at `a`, 1 at `b`) where the line meets the circle.
    private func intersections(_ fence: IndexedFence, _ a: Spot, _ b: Spot) -> (Double, Double)? {
        let (ax, ay) = fence.local(a.latitude, a.longitude), (bx, by) = fence.local(b.latitude, b.longitude)
        let dx = bx - ax, dy = by - ay
        let qa = dx * dx + dy * dy
        guard qa > 0 else { return nil }
        let qb = 2 * (ax * dx + ay * dy), qc = ax * ax + ay * ay - fence.fence.radiusM * fence.fence.radiusM
        let discriminant = qb * qb - 4 * qa * qc
        guard discriminant >= 0 else { return nil }
        let root = discriminant.squareRoot()
        return ((-qb - root) / (2 * qa), (-qb + root) / (2 * qa))
    }

    /// The place `t` of the way from `a` to `b`, and when the device was there.
    /// Over a long interval with one end standing (a departure after a stop,
    /// an arrival before one), the device did not cover it at an even pace:
    /// the moving end's own speed dates the crossing.
    private func interpolate(_ a: Spot, _ b: Spot, _ t: Double) -> Spot {
        let latitude = a.latitude + (b.latitude - a.latitude) * t, longitude = a.longitude + (b.longitude - a.longitude) * t
        let span = Double(b.timeMs - a.timeMs)
        var timeMs = a.timeMs + Int64((span * t).rounded())
        let standing = 0.5, va = a.speedMps ?? -1, vb = b.speedMps ?? -1
        if span > 5_000, (va >= 0 && va < standing) != (vb >= 0 && vb < standing), va >= 0, vb >= 0 {
            let metres = Geodesy.distance(a.latitude, a.longitude, b.latitude, b.longitude)
            if va < standing {
                timeMs = max(a.timeMs, b.timeMs - Int64(metres * (1 - t) / vb * 1000))  // left a stop: dated back from b
            } else {
                timeMs = min(b.timeMs, a.timeMs + Int64(metres * t / va * 1000))  // came to a stop: dated on from a
            }
        }
        return Spot(timeMs: timeMs, latitude: latitude, longitude: longitude)
    }
}

/// A device's open visits by fence key. A device is inside a handful of
/// fences at most, so a short list searched in order beats hashing a
/// string for every fence near every point.
public struct FenceVisits: Codable, Sendable, Equatable, Sequence {
    private var entries: [Entry] = []

    struct Entry: Codable, Sendable, Equatable {
        var key: String
        var visit: FenceVisit
    }

    public init() {}

    public var isEmpty: Bool { entries.isEmpty }
    public var count: Int { entries.count }
    public var values: [FenceVisit] { entries.map(\.visit) }

    public subscript(key: String) -> FenceVisit? {
        get { entries.first { $0.key == key }?.visit }
        set {
            let index = entries.firstIndex { $0.key == key }
            switch (index, newValue) {
            case (let i?, let visit?): entries[i].visit = visit
            case (let i?, nil): entries.remove(at: i)
            case (nil, let visit?): entries.append(Entry(key: key, visit: visit))
            case (nil, nil): break
            }
        }
    }

    public func makeIterator() -> some IteratorProtocol<(key: String, visit: FenceVisit)> {
        entries.lazy.map { (key: $0.key, visit: $0.visit) }.makeIterator()
    }

    // Stored as an object, the shape a reader expects.
    public init(from decoder: any Decoder) throws {
        let map = try [String: FenceVisit](from: decoder)
        entries = map.sorted { $0.key < $1.key }.map { Entry(key: $0.key, visit: $0.value) }
    }

    public func encode(to encoder: any Encoder) throws {
        try Dictionary(uniqueKeysWithValues: entries.map { ($0.key, $0.visit) }).encode(to: encoder)
    }
}

extension FenceVisits: BinaryStorable {
    public func write(to w: inout BinaryWriter) { w.write(entries) }
    public init(from r: inout BinaryReader) throws { entries = try r.read() }
}

extension FenceVisits.Entry: BinaryStorable {
    func write(to w: inout BinaryWriter) { w.write(key, visit) }
    init(from r: inout BinaryReader) throws { self.init(key: try r.read(), visit: try r.read()) }
}
