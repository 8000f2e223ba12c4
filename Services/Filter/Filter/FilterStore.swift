import FilterCore
import FoundationEssentials
import Model
import Runtime
import Store

/// The filter's own tables: the judgements (the decision log and the judged
/// fixes, layer 3, one row a fix) and the points outbox, both DeviceLogs.
/// Device rows live in the host's table.
final class FilterStore {
    let judgements: DeviceLog
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
        // The decision log and the judged fixes become one log, each body holding both as parts
        // `d` and `p` (LoggedJudgement): one row a fix, not two. Bodies move as they were, in the
        // order they were written (rowid order: no sort, whatever the size of the logs). A device
        // with a row that lacks a part (its layer was off) is noted, so only its queries look into
        // bodies; the note is the device's, so it moves with it when stores are repartitioned.
        ("7-one-judgement-log", DeviceLog.schema("judgements") + """

            CREATE TABLE judgement_parts_missing (device TEXT NOT NULL, part TEXT NOT NULL, PRIMARY KEY (device, part)) WITHOUT ROWID;
            INSERT INTO judgement_parts_missing (device, part)
            SELECT DISTINCT j.device, 'd' FROM judged j
            WHERE NOT EXISTS (SELECT 1 FROM decisions d WHERE d.device = j.device AND d.seq = j.seq)
            UNION
            SELECT DISTINCT d.device, 'p' FROM decisions d
            WHERE NOT EXISTS (SELECT 1 FROM judged j WHERE j.device = d.device AND j.seq = d.seq);
            INSERT INTO judgements (device, seq, sessionID, timeMs, body)
            SELECT j.device, j.seq, j.sessionID, j.timeMs,
                   CASE WHEN d.body IS NULL THEN json_object('p', json(j.body))
                        ELSE json_object('d', json(d.body), 'p', json(j.body)) END
            FROM judged j LEFT JOIN decisions d ON d.device = j.device AND d.seq = j.seq
            ORDER BY j.id;
            INSERT INTO judgements (device, seq, sessionID, timeMs, body)
            SELECT d.device, d.seq, d.sessionID, d.timeMs, json_object('d', json(d.body))
            FROM decisions d WHERE NOT EXISTS (SELECT 1 FROM judged j WHERE j.device = d.device AND j.seq = d.seq)
            ORDER BY d.id;
            DROP TABLE decisions;
            DROP TABLE judged;
            """),
    ]

    let db: Database

    private let notePartMissing: Statement

    init(db: Database) throws {
        self.db = db
        judgements = try DeviceLog(db: db, table: "judgements")
        notePartMissing = try db.prepare("INSERT OR IGNORE INTO judgement_parts_missing (device, part) VALUES (?, ?)")
        points = try DeviceLog(db: db, table: "points")
    }

    /// The device has judgements without `part` (its layer is off): its
    /// pages of that part must skip them.
    func notePartMissing(_ device: DeviceID, part: String) throws {
        try notePartMissing.run(.text(device.rawValue), .text(part))
    }

    /// A page of one part of the device's judgements (`LoggedJudgement`):
    /// read from inside the bodies only when some of its rows lack that part.
    static func page(_ query: QueryContext, part: String, sessionID: String?, limit: Int, offset: Int) throws -> QueryResult {
        let someLack = try query.db.first("SELECT 1 FROM judgement_parts_missing WHERE device = ? AND part = ?",
                                          [.text(query.device.rawValue), .text(part)]) { _ in true } ?? false
        return try query.page("judgements", part: part, onlyWherePresent: someLack, sessionID: sessionID, limit: limit, offset: offset)
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
