import FoundationEssentials
import Model
import MotionCore
import Runtime
import Store

/// `addGeofence`'s arguments, checked by name.
struct GeofenceArgs: Decodable {
    var id: String
    var latitude: Double
    var longitude: Double
    var radiusM: Double
    var notifyOnEntry: Bool?
    var notifyOnExit: Bool?
    var dwellAfterMs: Int?

    private enum CodingKeys: String, CodingKey { case id, latitude, longitude, radiusM, notifyOnEntry, notifyOnExit, dwellAfterMs }
    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(String.self, forKey: .id)
        latitude = try c.decode(Double.self, forKey: .latitude)
        longitude = try c.decode(Double.self, forKey: .longitude)
        radiusM = try c.decode(Double.self, forKey: .radiusM)
        notifyOnEntry = try c.decodeIfPresent(Bool.self, forKey: .notifyOnEntry)
        notifyOnExit = try c.decodeIfPresent(Bool.self, forKey: .notifyOnExit)
        dwellAfterMs = try c.decodeWholeNumberIfPresent(forKey: .dwellAfterMs)
    }
}

struct FenceIDArgs: Decodable { var id: String }
struct PaceArgs: Decodable { var isMoving: Bool }
struct RouteArgs: Decodable { var points: [RoutePoint] }

struct HistoryArgs: Decodable {
    var geofenceID: String?
    var page: PageArgs
    init(from decoder: any Decoder) throws {
        geofenceID = try decoder.container(keyedBy: Key.self).decodeIfPresent(String.self, forKey: .geofenceID)
        page = try PageArgs(from: decoder)
    }
    private enum Key: String, CodingKey { case geofenceID }
}

struct PeriodArgs: Decodable {
    var fromMs: Int?
    var toMs: Int?
    var page: PageArgs
    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Key.self)
        fromMs = try c.decodeWholeNumberIfPresent(forKey: .fromMs)
        toMs = try c.decodeWholeNumberIfPresent(forKey: .toMs)
        page = try PageArgs(from: decoder)
    }
    private enum Key: String, CodingKey { case fromMs, toMs }
}

extension MotionHandler {
    static let maxFenceIDLength = 64

    var commands: [CommandRoute<MotionDeviceRow>] {
        [
            CommandRoute("changePace") { [self] command, work in try changePace(command, work) },
            CommandRoute("addGeofence", scope: .any) { [self] command, work in try addGeofence(command, work) },
            CommandRoute("removeGeofence", scope: .any) { [self] command, work in
                let id = try command.arguments(FenceIDArgs.self).id
                return try remove([id], work) == 1
            }.mergingFleetReplies(.anyTrue),
            CommandRoute("removeAllGeofences", scope: .any) { [self] _, work in
                try remove(fences(work.device).fences.map(\.fence.id), work)
            }.mergingFleetReplies(.largest),
            // Each partition holds the crossings of its own devices.
            CommandRoute("deleteGeofenceEvents", scope: .any) { [self] command, work in
                let args = try command.arguments(HistoryArgs.self)
                return try store.deleteCrossings(work.device, fence: args.geofenceID)
            }.mergingFleetReplies(.sum),
            CommandRoute("setActiveRoute") { [self] command, work in try setActiveRoute(command, work) },
            CommandRoute("isOffRoute") { _, work in work.row.route?.offRoute ?? false },
            .query("getGeofences", scope: .any) { _, query in
                .page(JSONPage(bounding: try query.db.query("SELECT body FROM fences WHERE owner = ? ORDER BY id",
                                                            [.text(query.device.rawValue)]) { $0.string(0) },
                               offset: 0, maxBytes: query.maxReplyBytes))
            },
            .query("getGeofenceEvents", scope: .any) { command, query in
                let args = try command.arguments(HistoryArgs.self)
                let (limit, offset) = try args.page.validated()
                var sql = "SELECT body FROM crossings WHERE " + (query.device == .fleet ? "fleet = 1" : "device = ?")
                var bindings: [SQLValue] = query.device == .fleet ? [] : [.text(query.device.rawValue)]
                if let fence = args.geofenceID { sql += " AND fence = ?"; bindings.append(.text(fence)) }
                sql += " ORDER BY timeMs DESC, rowid DESC LIMIT ? OFFSET ?"
                bindings += [.int(limit), .int(offset)]
                return .page(JSONPage(bounding: try query.db.query(sql, bindings) { $0.string(0) }, offset: offset, maxBytes: query.maxReplyBytes))
            }.mergingFleetReplies(.newestFirst(by: "timeMs")),
            .query("getTrips") { command, query in try Self.period("trips", "startMs", command, query) },
            .query("getStops") { command, query in try Self.period("stops", "arrivalMs", command, query) },
        ]
    }

    /// Trips or stops of a device within an optional period, oldest first (newest last).
    private static func period(_ table: String, _ column: String, _ command: IncomingCommand, _ query: QueryContext) throws -> QueryResult {
        let args = try command.arguments(PeriodArgs.self)
        let (limit, offset) = try args.page.validated()
        let rows = try query.db.query("""
            SELECT body FROM \(table) WHERE device = ? AND \(column) >= ? AND \(column) <= ? ORDER BY \(column) LIMIT ? OFFSET ?
            """, [.text(query.device.rawValue), .int(args.fromMs ?? 0), .int(args.toMs ?? Int(Int64.max)), .int(limit), .int(offset)]) { $0.string(0) }
        return .page(JSONPage(bounding: rows, offset: offset, maxBytes: query.maxReplyBytes))
    }

    private func changePace(_ command: IncomingCommand, _ work: Work<MotionDeviceRow>) throws -> [String: String] {
        let isMoving = try command.arguments(PaceArgs.self).isMoving
        guard work.row.openSession != nil else {
            throw CommandError(.notReady, "\(work.device) has no open session: start one (start) or send fixes first")
        }
        try apply(core.changePace(isMoving: isMoving, atMs: work.row.deviceTime(wallMs: work.nowMs), row: &work.row.motion), work)
        try updateTimer(work)
        return ["state": (work.row.motion.state ?? .stationary).rawValue]
    }

    private func addGeofence(_ command: IncomingCommand, _ work: Work<MotionDeviceRow>) throws -> Geofence {
        let args = try command.arguments(GeofenceArgs.self)
        let fleet = work.device == .fleet
        let fence = try validated(args, fleet: fleet)
        let index = try fences(work.device)
        let cap = fleet ? settings.maxFleetGeofences : settings.maxGeofencesPerDevice
        guard index.fence(fence.id) != nil || index.count < cap else {
            throw CommandError(.limitReached, "\(work.device) has \(index.count) fences, the most allowed "
                               + "(\(fleet ? "maxFleetGeofences" : "maxGeofencesPerDevice") = \(cap)); remove one first")
        }
        try saveFence(fence, in: index, owner: work.device)
        work.emit(.geofenceAdded(fence))
        if fence.radiusM < settings.minReliableRadiusM {
            work.emit(.diagnostic(code: "smallGeofence", message:
                "fence '\(fence.id)' has a radius of \(fence.radiusM.fixed(0)) m, below the \(settings.minReliableRadiusM.fixed(0)) m a phone's fix reliably resolves (minReliableRadiusM): entries and exits may be missed or late"))
        }
        guard !fleet else { return fence }  // devices enter a fleet fence at their next point
        // Re-arming starts the visit (and its dwell) again; armed around the device, it enters at once.
        let atMs = work.row.deviceTime(wallMs: work.nowMs)
        if let entry = geofencing.arm(fence, at: work.row.motion.lastPoint, atMs: atMs, visits: &work.row.visits) {
            try apply([entry], work)
        }
        try updateTimer(work)
        return fence
    }

    private func validated(_ args: GeofenceArgs, fleet: Bool) throws -> Geofence {
        let id = args.id.trimmingWhitespace()
        guard !id.isEmpty, id == args.id, id.count <= Self.maxFenceIDLength, !id.contains(where: { $0.isNewline || $0 == "/" }) else {
            throw CommandError(.badInput, "id must be 1…\(Self.maxFenceIDLength) characters, without surrounding spaces, line breaks or '/'")
        }
        guard args.latitude.isFinite, (-90...90).contains(args.latitude) else {
            throw CommandError(.badInput, "latitude must be within -90…90, got \(args.latitude)")
        }
        guard args.longitude.isFinite, (-180...180).contains(args.longitude) else {
            throw CommandError(.badInput, "longitude must be within -180…180, got \(args.longitude)")
        }
        guard args.radiusM.isFinite, args.radiusM > 0, args.radiusM <= settings.maxRadiusM else {
            throw CommandError(.badInput, "radiusM must be above 0 and at most \(Int(settings.maxRadiusM)) (maxGeofenceRadiusM), got \(args.radiusM)")
        }
        if let dwell = args.dwellAfterMs, !(0...31_536_000_000).contains(dwell) {
            throw CommandError(.badInput, "dwellAfterMs must be within 0…31536000000 (a year), got \(dwell)")
        }
        return Geofence(id: id, latitude: args.latitude, longitude: args.longitude, radiusM: args.radiusM,
                        notifyOnEntry: args.notifyOnEntry ?? true, notifyOnExit: args.notifyOnExit ?? true,
                        dwellAfterMs: args.dwellAfterMs.map(Int64.init), fleet: fleet ? true : nil)
    }

    /// Removes fences by id; one `geofenceRemoved` each. History stays until deleted.
    private func remove(_ ids: [String], _ work: Work<MotionDeviceRow>) throws -> Int {
        let fleet = work.device == .fleet
        let index = try fences(work.device)
        var removed = 0
        for id in ids where try store.removeFence(id, owner: work.device) {
            index.remove(id)
            work.row.visits[Geofencing.key(id, fleet: fleet)] = nil
            work.emit(.geofenceRemoved(id: id, fleet: fleet ? true : nil))
            removed += 1
        }
        if removed > 0 { try updateTimer(work) }
        return removed
    }

    private func setActiveRoute(_ command: IncomingCommand, _ work: Work<MotionDeviceRow>) throws -> [String: Int] {
        let points = try command.arguments(RouteArgs.self).points
        guard points.count != 1, points.count <= settings.maxRoutePoints else {
            throw CommandError(.badInput, "points: a route needs 2…\(settings.maxRoutePoints) points (maxRoutePoints), or none to clear it; got \(points.count)")
        }
        if let bad = points.firstIndex(where: { !$0.latitude.isFinite || !$0.longitude.isFinite || abs($0.latitude) > 90 || abs($0.longitude) > 180 }) {
            throw CommandError(.badInput, "points[\(bad)]: latitude must be within -90…90 and longitude within -180…180")
        }
        try store.saveRoute(points, device: work.device)
        forgetRoute(work.device)
        work.row.route = points.isEmpty ? nil : RouteProgress()
        return ["points": points.count]
    }
}
