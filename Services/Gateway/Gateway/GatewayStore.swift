import Foundation
import GatewayCore
import Model
import Runtime
import Store

/// The gateway's SQLite state: per-device seq and session bookkeeping, the
/// sessions, and the raw-fix ring buffer (which doubles as the outbox).
final class GatewayStore: OutboxStore {
    let db: Database
    // Run for every fix: prepared once.
    private let hasFixStatement: Statement
    private let insertFixStatement: Statement

    init(path: String) throws {
        db = try Database(path: path)
        var migrator = Migrator()
        migrator.register("1-gateway", """
            CREATE TABLE devices (
                device TEXT PRIMARY KEY,
                lastSeq INTEGER NOT NULL DEFAULT 0,
                ackedThrough INTEGER NOT NULL DEFAULT 0,
                sessionID TEXT,
                lastFixMs INTEGER,
                lastReceivedMs INTEGER
            );
            CREATE TABLE sessions (
                id TEXT PRIMARY KEY,
                device TEXT NOT NULL,
                tag TEXT,
                startMs INTEGER NOT NULL,
                endMs INTEGER,
                auto INTEGER NOT NULL
            );
            CREATE INDEX sessions_by_device ON sessions(device, startMs);
            CREATE TABLE raw_fixes (
                device TEXT NOT NULL,
                seq INTEGER NOT NULL,
                timeMs INTEGER NOT NULL,
                sessionID TEXT,
                body TEXT NOT NULL,
                PRIMARY KEY (device, seq)
            ) WITHOUT ROWID;
            CREATE UNIQUE INDEX raw_fixes_by_time ON raw_fixes(device, timeMs);
            CREATE INDEX raw_fixes_by_session ON raw_fixes(sessionID, seq);
            """)
        // A session index cost one page of WAL on every fix's commit; session
        // queries are diagnostics and scan the device's own key range instead.
        migrator.register("2-drop-session-index", "DROP INDEX IF EXISTS raw_fixes_by_session")
        try migrator.migrate(db)
        hasFixStatement = try db.prepare("SELECT 1 FROM raw_fixes WHERE device = ? AND timeMs = ?")
        insertFixStatement = try db.prepare("INSERT INTO raw_fixes (device, seq, timeMs, sessionID, body) VALUES (?, ?, ?, ?, ?)")
    }

    struct DeviceRow {
        var lastSeq: Int64
        var sessions: DeviceSessions
    }

    func device(_ device: DeviceID) throws -> DeviceRow? {
        try db.first("""
            SELECT lastSeq, sessionID, lastFixMs, lastReceivedMs FROM devices WHERE device = ?
            """, [.text(device.rawValue)]) { row in
            (row.int64(0), row.optionalString(1), row.optionalInt64(2), row.optionalInt64(3))
        }.map { lastSeq, sessionID, lastFixMs, lastReceivedMs in
            let session = try sessionID.flatMap { try self.session(id: $0) }
            return DeviceRow(lastSeq: lastSeq,
                             sessions: DeviceSessions(current: session, lastFixMs: lastFixMs, lastReceivedMs: lastReceivedMs))
        }
    }

    func saveDevice(_ device: DeviceID, _ row: DeviceRow) throws {
        try db.run("""
            INSERT INTO devices (device, lastSeq, sessionID, lastFixMs, lastReceivedMs)
            VALUES (?, ?, ?, ?, ?)
            ON CONFLICT(device) DO UPDATE SET lastSeq = excluded.lastSeq,
                sessionID = excluded.sessionID, lastFixMs = excluded.lastFixMs, lastReceivedMs = excluded.lastReceivedMs
            """, .text(device.rawValue), .integer(row.lastSeq),
                   .string(row.sessions.current?.id), .int(row.sessions.lastFixMs), .int(row.sessions.lastReceivedMs))
    }

    func saveAckedThrough(_ device: DeviceID, _ seq: Int64) throws {
        try db.run("UPDATE devices SET ackedThrough = max(ackedThrough, ?) WHERE device = ?", .integer(seq), .text(device.rawValue))
    }

    func ackWatermarks() throws -> [(DeviceID, Int64)] {
        try db.query("SELECT device, ackedThrough FROM devices") { row in
            (DeviceID(row.string(0)), row.int64(1))
        }.compactMap { id, acked in id.map { ($0, acked) } }
    }

    // MARK: Ring buffer

    func hasFix(_ device: DeviceID, timeMs: Int64) throws -> Bool {
        try hasFixStatement.exists(.text(device.rawValue), .integer(timeMs))
    }

    func insertFix(_ fix: RawFix, body: Data) throws {
        try insertFixStatement.run(.text(fix.device.rawValue), .integer(fix.seq), .integer(fix.timeMs),
                                   .string(fix.sessionID), .json(body))
    }

    /// Trims the ring to `capacity`, never dropping a fix not yet acknowledged downstream.
    func trim(_ device: DeviceID, lastSeq: Int64, ackedThrough: Int64, capacity: Int) throws {
        let cutoff = min(lastSeq - Int64(capacity), ackedThrough)
        guard cutoff > 0 else { return }
        try db.run("DELETE FROM raw_fixes WHERE device = ? AND seq <= ?", .text(device.rawValue), .integer(cutoff))
    }

    func unacknowledged(_ device: DeviceID, after seq: Int64) throws -> [(seq: Int64, body: String)] {
        try db.query("SELECT seq, body FROM raw_fixes WHERE device = ? AND seq > ? ORDER BY seq",
                     [.text(device.rawValue), .integer(seq)]) { ($0.int64(0), $0.string(1)) }
    }

    func rawFixes(_ device: DeviceID, sessionID: String?, limit: Int, offset: Int) throws -> [RawFix] {
        let bodies: [String]
        if let sessionID {
            bodies = try db.query("""
                SELECT body FROM raw_fixes WHERE device = ? AND sessionID = ? ORDER BY seq LIMIT ? OFFSET ?
                """, [.text(device.rawValue), .text(sessionID), .int(limit), .int(offset)]) { $0.string(0) }
        } else {
            bodies = try db.query("SELECT body FROM raw_fixes WHERE device = ? ORDER BY seq LIMIT ? OFFSET ?",
                                  [.text(device.rawValue), .int(limit), .int(offset)]) { $0.string(0) }
        }
        return try bodies.map { try JSONCoding.decoder.decode(RawFix.self, from: Data($0.utf8)) }
    }

    // MARK: Sessions

    func saveSession(_ s: Session) throws {
        try db.run("""
            INSERT INTO sessions (id, device, tag, startMs, endMs, auto) VALUES (?, ?, ?, ?, ?, ?)
            ON CONFLICT(id) DO UPDATE SET endMs = excluded.endMs
            """, .text(s.id), .text(s.device.rawValue), .string(s.tag), .integer(s.startMs), .int(s.endMs), .bool(s.auto ?? false))
    }

    func session(id: String) throws -> Session? {
        try db.first("SELECT id, device, tag, startMs, endMs, auto FROM sessions WHERE id = ?", [.text(id)], map: Self.session) ?? nil
    }

    /// Sessions overlapping [fromMs, toMs], oldest first.
    func sessions(_ device: DeviceID, fromMs: Int64?, toMs: Int64?) throws -> [Session] {
        try db.query("""
            SELECT id, device, tag, startMs, endMs, auto FROM sessions
            WHERE device = ? AND (endMs IS NULL OR endMs >= ?) AND startMs <= ?
            ORDER BY startMs, id
            """, [.text(device.rawValue), .integer(fromMs ?? .min), .integer(toMs ?? .max)], map: Self.session)
            .compactMap { $0 }
    }

    static func session(_ row: Row) -> Session? {
        guard let device = DeviceID(row.string(1)) else { return nil }
        return Session(id: row.string(0), device: device, tag: row.optionalString(2), startMs: row.int64(3),
                       endMs: row.optionalInt64(4), auto: row.int64(5) != 0)
    }
}
