import FoundationEssentials
import Model
import Runtime
import Store

/// The motion service's own tables: fences, their crossings, trips and
/// stops, active routes, the wall-clock timers of silent devices, and the
/// outbox of motion states. Device rows live in the host's table.
final class MotionStore {
    let motion: DeviceLog
    private let db: Database
    private let insertCrossing: Statement
    private let upsertTimer: Statement
    private let deleteTimer: Statement
    /// Crossings, trips and stops, each held per device and in all.
    private let crossings, trips, stops: HistoryRetention

    static let migrations: [(name: String, sql: String)] = [
        ("1-motion", DeviceLog.schema("motion") + """

            CREATE TABLE fences (
                owner TEXT NOT NULL, id TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (owner, id)
            ) WITHOUT ROWID;
            CREATE TABLE crossings (
                device TEXT NOT NULL, fence TEXT NOT NULL, fleet INTEGER NOT NULL, timeMs INTEGER NOT NULL, body TEXT NOT NULL
            );
            CREATE INDEX crossings_by_device ON crossings(device, fence);
            CREATE INDEX crossings_by_time ON crossings(device, timeMs);
            CREATE INDEX crossings_by_fleet_fence ON crossings(fleet, fence);
            CREATE TABLE trips (device TEXT NOT NULL, startMs INTEGER NOT NULL, body TEXT NOT NULL, PRIMARY KEY (device, startMs));
            CREATE TABLE stops (device TEXT NOT NULL, arrivalMs INTEGER NOT NULL, body TEXT NOT NULL, PRIMARY KEY (device, arrivalMs));
            CREATE TABLE routes (device TEXT PRIMARY KEY, body TEXT NOT NULL);
            CREATE TABLE timers (device TEXT PRIMARY KEY, dueMs INTEGER NOT NULL);
            CREATE INDEX timers_by_due ON timers(dueMs);
            """),
        // The outbox becomes append-ordered (DeviceLog): a state goes to the table's end, not into its device's pages.
        ("2-append-ordered-outbox", DeviceLog.reshape("motion")),
    ]

    init(db: Database, historyPerDevice: Int = 10_000, historyTotal: Int = 1_000_000) throws {
        self.db = db
        crossings = try HistoryRetention(db: db, table: "crossings", orderColumn: "timeMs", keepPerDevice: historyPerDevice, maxTotal: historyTotal)
        trips = try HistoryRetention(db: db, table: "trips", orderColumn: "startMs", keepPerDevice: historyPerDevice, maxTotal: historyTotal)
        stops = try HistoryRetention(db: db, table: "stops", orderColumn: "arrivalMs", keepPerDevice: historyPerDevice, maxTotal: historyTotal)
        motion = try DeviceLog(db: db, table: "motion")
        insertCrossing = try db.prepare("INSERT INTO crossings (device, fence, fleet, timeMs, body) VALUES (?, ?, ?, ?, ?)")
        upsertTimer = try db.prepare("INSERT OR REPLACE INTO timers (device, dueMs) VALUES (?, ?)")
        deleteTimer = try db.prepare("DELETE FROM timers WHERE device = ?")
    }

    // MARK: Fences (owner: a device, or `_fleet`)

    func fences(_ owner: DeviceID) throws -> [Geofence] {
        try db.query("SELECT body FROM fences WHERE owner = ? ORDER BY id", [.text(owner.rawValue)]) {
            try JSONCoding.decoder.decode(Geofence.self, from: $0.data(0))
        }
    }

    /// Every owner with at least one fence (the primary key's first column: no table scan).
    func fenceOwners() throws -> Set<DeviceID> {
        Set(try db.query("SELECT DISTINCT owner FROM fences") { DeviceID(allowingReserved: $0.string(0)) }.compactMap { $0 })
    }

    func saveFence(_ fence: Geofence, owner: DeviceID) throws {
        try db.run("INSERT OR REPLACE INTO fences (owner, id, body) VALUES (?, ?, ?)",
                   .text(owner.rawValue), .text(fence.id), .json(JSONCoding.encode(fence)))
    }

    /// Whether a fence was there to remove.
    func removeFence(_ id: String, owner: DeviceID) throws -> Bool {
        try db.run("DELETE FROM fences WHERE owner = ? AND id = ?", .text(owner.rawValue), .text(id))
        return db.changes > 0
    }

    func removeAllFences(_ owner: DeviceID) throws {
        try db.run("DELETE FROM fences WHERE owner = ?", .text(owner.rawValue))
    }

    // MARK: Crossings, trips, stops

    /// Each `record` returns whether its table was cut to its total.
    func record(_ crossing: Crossing, device: DeviceID) throws -> Bool {
        var stored = crossing
        stored.device = device
        try insertCrossing.run(.text(device.rawValue), .text(crossing.geofenceID), .bool(crossing.fleet == true),
                               .integer(crossing.timeMs), .json(JSONCoding.encode(stored)))
        return try crossings.added()
    }

    /// Deletes the history of one fence or all, of a device (or, for
    /// `_fleet`, of the fleet's fences on every device); returns how many.
    func deleteCrossings(_ owner: DeviceID, fence: String?) throws -> Int {
        let (scope, bindings): (String, [SQLValue]) = owner == .fleet ? ("fleet = 1", []) : ("device = ? AND fleet = 0", [.text(owner.rawValue)])
        if let fence {
            try db.run("DELETE FROM crossings WHERE \(scope) AND fence = ?", bindings + [.text(fence)])
        } else {
            try db.run("DELETE FROM crossings WHERE \(scope)", bindings)
        }
        crossings.removed(db.changes)
        return db.changes
    }

    func record(_ trip: Trip, device: DeviceID) throws -> Bool {
        try db.run("INSERT OR REPLACE INTO trips (device, startMs, body) VALUES (?, ?, ?)",
                   .text(device.rawValue), .integer(trip.startMs), .json(JSONCoding.encode(TripReport(trip))))
        return try trips.added()
    }

    func record(_ stop: Stop, device: DeviceID) throws -> Bool {
        try db.run("INSERT OR REPLACE INTO stops (device, arrivalMs, body) VALUES (?, ?, ?)",
                   .text(device.rawValue), .integer(stop.arrivalMs), .json(JSONCoding.encode(StopReport(stop))))
        return try stops.added()
    }

    /// Deletes the device's history (crossings, trips, stops) from before
    /// `timeMs`, and beyond the rows it keeps of each.
    func trimHistory(_ device: DeviceID, before timeMs: Int64) throws {
        for (history, column) in [(crossings, "timeMs"), (trips, "startMs"), (stops, "arrivalMs")] {
            try db.run("DELETE FROM \(history.table) WHERE device = ? AND \(column) < ?", .text(device.rawValue), .integer(timeMs))
            history.removed(db.changes)
            try history.trim(device)
        }
    }

    // MARK: Routes and timers

    func route(_ device: DeviceID) throws -> [RoutePoint]? {
        try db.first("SELECT body FROM routes WHERE device = ?", [.text(device.rawValue)]) {
            try JSONCoding.decoder.decode([RoutePoint].self, from: $0.data(0))
        }
    }

    /// Whether the device has an active route (its points not read: a body that does not decode is no reason to stall).
    func hasRoute(_ device: DeviceID) throws -> Bool {
        try db.first("SELECT 1 FROM routes WHERE device = ?", [.text(device.rawValue)]) { _ in true } ?? false
    }

    func saveRoute(_ points: [RoutePoint], device: DeviceID) throws {
        if points.isEmpty {
            try db.run("DELETE FROM routes WHERE device = ?", .text(device.rawValue))
        } else {
            try db.run("INSERT OR REPLACE INTO routes (device, body) VALUES (?, ?)", .text(device.rawValue), .json(JSONCoding.encode(points)))
        }
    }

    func setTimer(_ device: DeviceID, dueMs: Int64?) throws {
        if let dueMs { try upsertTimer.run(.text(device.rawValue), .integer(dueMs)) } else { try deleteTimer.run(.text(device.rawValue)) }
    }

    func devicesDue(byMs nowMs: Int64) throws -> [DeviceID] {
        try db.query("SELECT device FROM timers WHERE dueMs <= ? ORDER BY dueMs LIMIT 10000", [.integer(nowMs)]) {
            DeviceID($0.string(0))
        }.compactMap { $0 }
    }
}

/// One point of an active route.
struct RoutePoint: Codable, Equatable {
    var latitude: Double
    var longitude: Double
}

/// A stop as the reports return it: with its duration.
struct StopReport: Encodable {
    let stop: Stop
    init(_ stop: Stop) { self.stop = stop }
    private enum Key: String, CodingKey { case durationSec }
    func encode(to encoder: any Encoder) throws {
        try stop.encode(to: encoder)
        var c = encoder.container(keyedBy: Key.self)
        try c.encodeIfPresent(stop.durationSec, forKey: .durationSec)
    }
}
