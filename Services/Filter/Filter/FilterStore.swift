import FilterCore
import Foundation
import Model
import Runtime
import Store

/// The filter's SQLite state: per-device filter state with its last applied
/// seq, the decision log, the judged fixes (layer 3) and the points outbox.
final class FilterStore: OutboxStore {
    let db: Database
    // Run for every fix: prepared once.
    private let insertStatements: [Table: Statement]

    init(path: String) throws {
        db = try Database(path: path)
        var migrator = Migrator()
        migrator.register("1-filter", """
            CREATE TABLE devices (
                device TEXT PRIMARY KEY,
                lastSeq INTEGER NOT NULL DEFAULT 0,
                ackedThrough INTEGER NOT NULL DEFAULT 0,
                state TEXT NOT NULL
            );
            CREATE TABLE decisions (
                device TEXT NOT NULL, seq INTEGER NOT NULL, sessionID TEXT, body TEXT NOT NULL,
                PRIMARY KEY (device, seq)
            ) WITHOUT ROWID;
            CREATE INDEX decisions_by_session ON decisions(sessionID, seq);
            CREATE TABLE judged (
                device TEXT NOT NULL, seq INTEGER NOT NULL, sessionID TEXT, body TEXT NOT NULL,
                PRIMARY KEY (device, seq)
            ) WITHOUT ROWID;
            CREATE INDEX judged_by_session ON judged(sessionID, seq);
            CREATE TABLE points (
                device TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL,
                PRIMARY KEY (device, seq)
            ) WITHOUT ROWID;
            """)
        // Session indexes cost a page of WAL per index on every commit; session
        // queries are diagnostics and scan the device's own key range instead.
        migrator.register("2-drop-session-indexes", """
            DROP INDEX IF EXISTS decisions_by_session;
            DROP INDEX IF EXISTS judged_by_session;
            """)
        try migrator.migrate(db)
        insertStatements = [
            .decisions: try db.prepare("INSERT OR REPLACE INTO decisions (device, seq, sessionID, body) VALUES (?, ?, ?, ?)"),
            .judged: try db.prepare("INSERT OR REPLACE INTO judged (device, seq, sessionID, body) VALUES (?, ?, ?, ?)"),
            .points: try db.prepare("INSERT OR REPLACE INTO points (device, seq, body) VALUES (?, ?, ?)"),
        ]
    }

    struct DeviceRow {
        var lastSeq: Int64
        var state: DeviceFilterState
        /// The saved filter state did not decode (an older version's) and restarted.
        var restarted = false
    }

    func device(_ device: DeviceID) throws -> DeviceRow? {
        try db.first("SELECT lastSeq, state FROM devices WHERE device = ?", [.text(device.rawValue)]) {
            ($0.int64(0), $0.string(1))
        }.map { lastSeq, body in
            let (state, restarted) = DeviceFilterState.restored(from: Data(body.utf8), using: JSONCoding.decoder)
            return DeviceRow(lastSeq: lastSeq, state: state, restarted: restarted)
        }
    }

    func save(_ device: DeviceID, _ row: DeviceRow) throws {
        try db.run("""
            INSERT INTO devices (device, lastSeq, state) VALUES (?, ?, ?)
            ON CONFLICT(device) DO UPDATE SET lastSeq = excluded.lastSeq, state = excluded.state
            """, .text(device.rawValue), .integer(row.lastSeq), .json(JSONCoding.encode(row.state)))
    }

    func saveAckedThrough(_ device: DeviceID, _ seq: Int64) throws {
        try db.run("UPDATE devices SET ackedThrough = max(ackedThrough, ?) WHERE device = ?", .integer(seq), .text(device.rawValue))
    }

    func ackWatermarks() throws -> [(DeviceID, Int64)] {
        try db.query("SELECT device, ackedThrough FROM devices") { (DeviceID($0.string(0)), $0.int64(1)) }
            .compactMap { id, acked in id.map { ($0, acked) } }
    }

    func insert(_ table: Table, device: DeviceID, seq: Int64, sessionID: String?, body: Data) throws {
        let statement = insertStatements[table]!
        if table == .points {
            try statement.run(.text(device.rawValue), .integer(seq), .json(body))
        } else {
            try statement.run(.text(device.rawValue), .integer(seq), .string(sessionID), .json(body))
        }
    }

    enum Table: String { case decisions, judged, points }

    /// Keeps the newest `keep` rows per device; points never past what the broker acknowledged.
    func trim(_ device: DeviceID, lastSeq: Int64, ackedThrough: Int64, keep: Int) throws {
        let cutoff = lastSeq - Int64(keep)
        guard cutoff > 0 else { return }
        for table in [Table.decisions, .judged] {
            try db.run("DELETE FROM \(table.rawValue) WHERE device = ? AND seq <= ?", .text(device.rawValue), .integer(cutoff))
        }
        try db.run("DELETE FROM points WHERE device = ? AND seq <= ?", .text(device.rawValue), .integer(min(cutoff, ackedThrough)))
    }

    func unacknowledged(_ device: DeviceID, after seq: Int64) throws -> [(seq: Int64, body: String)] {
        try db.query("SELECT seq, body FROM points WHERE device = ? AND seq > ? ORDER BY seq",
                     [.text(device.rawValue), .integer(seq)]) { ($0.int64(0), $0.string(1)) }
    }

    func page(_ table: Table, device: DeviceID, sessionID: String?, limit: Int, offset: Int) throws -> [JSONValue] {
        let bodies: [String]
        if let sessionID {
            bodies = try db.query("""
                SELECT body FROM \(table.rawValue) WHERE device = ? AND sessionID = ? ORDER BY seq LIMIT ? OFFSET ?
                """, [.text(device.rawValue), .text(sessionID), .int(limit), .int(offset)]) { $0.string(0) }
        } else {
            bodies = try db.query("SELECT body FROM \(table.rawValue) WHERE device = ? ORDER BY seq LIMIT ? OFFSET ?",
                                  [.text(device.rawValue), .int(limit), .int(offset)]) { $0.string(0) }
        }
        return try bodies.map { try JSONCoding.decoder.decode(JSONValue.self, from: Data($0.utf8)) }
    }
}
