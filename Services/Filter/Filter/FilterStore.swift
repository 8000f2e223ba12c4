import FilterCore
import Foundation
import Model
import Runtime
import Store

/// The filter's own tables: the decision log, the judged fixes (layer 3)
/// and the points outbox, all DeviceLogs. Device rows live in the host's table.
final class FilterStore {
    let decisions: DeviceLog
    let judged: DeviceLog
    let points: DeviceLog

    static let migrations: [(name: String, sql: String)] = [
        ("1-filter", HostStore.legacyDevicesTable("state TEXT NOT NULL") + """
            CREATE TABLE decisions (
                device TEXT NOT NULL, seq INTEGER NOT NULL, sessionID TEXT, body TEXT NOT NULL, PRIMARY KEY (device, seq)
            ) WITHOUT ROWID;
            CREATE TABLE judged (
                device TEXT NOT NULL, seq INTEGER NOT NULL, sessionID TEXT, body TEXT NOT NULL, PRIMARY KEY (device, seq)
            ) WITHOUT ROWID;
            CREATE TABLE points (
                device TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL, PRIMARY KEY (device, seq)
            ) WITHOUT ROWID;
            """),
        ("2-drop-session-indexes", """
            DROP INDEX IF EXISTS decisions_by_session;
            DROP INDEX IF EXISTS judged_by_session;
            """),
        // Device rows move into the host's table, the last applied raw seq
        // into the input watermarks; the logs take the DeviceLog shape.
        ("3-host-rows", """
            INSERT OR IGNORE INTO host_devices (device, row, inputs, ackedThrough)
            SELECT device, json_object('state', json(state), 'rejections', 0),
                   json_object('raw', json_object('seq', lastSeq)), ackedThrough
            FROM devices;
            DROP TABLE devices;
            ALTER TABLE decisions ADD COLUMN timeMs INTEGER;
            ALTER TABLE judged ADD COLUMN timeMs INTEGER;
            ALTER TABLE points ADD COLUMN sessionID TEXT;
            ALTER TABLE points ADD COLUMN timeMs INTEGER;
            """),
        // Devices with a sparse fix held for the next one (look-ahead), and since when (wall clock).
        ("4-held", "CREATE TABLE held (device TEXT PRIMARY KEY, sinceMs INTEGER NOT NULL) WITHOUT ROWID;"),
        // Devices with fixes waiting (held, or in the smoothing lag), and when to look at them again.
        ("5-waiting", """
            CREATE TABLE waiting (device TEXT PRIMARY KEY, dueMs INTEGER NOT NULL) WITHOUT ROWID;
            INSERT INTO waiting (device, dueMs) SELECT device, sinceMs FROM held;
            DROP TABLE held;
            """),
        // The logs become append-ordered (DeviceLog): a fix's bodies go to the tables' ends, not into its device's pages.
        ("6-append-ordered-logs", DeviceLog.reshape("decisions") + DeviceLog.reshape("judged") + DeviceLog.reshape("points")),
    ]

    let db: Database

    init(db: Database) throws {
        self.db = db
        decisions = try DeviceLog(db: db, table: "decisions")
        judged = try DeviceLog(db: db, table: "judged")
        points = try DeviceLog(db: db, table: "points")
    }

    /// The device has fixes waiting, to look at again at `dueMs` (wall
    /// clock), or none (nil).
    func noteWaiting(_ device: DeviceID, due dueMs: Int64?) throws {
        if let dueMs {
            try db.run("INSERT OR REPLACE INTO waiting (device, dueMs) VALUES (?, ?)", .text(device.rawValue), .integer(dueMs))
        } else {
            try db.run("DELETE FROM waiting WHERE device = ?", .text(device.rawValue))
        }
    }

    /// Devices with fixes waiting that are due by `nowMs`.
    func waitingDue(_ nowMs: Int64) throws -> [DeviceID] {
        try db.query("SELECT device FROM waiting WHERE dueMs <= ? ORDER BY dueMs LIMIT 10000", [.integer(nowMs)]) {
            DeviceID($0.string(0))
        }.compactMap { $0 }
    }
}
