import FoundationEssentials
import Model
import Runtime
import Store
import UploaderCore

/// The durable upload queue and the sync config, on the host's store (the
/// host enqueues in the batch that records the point's seq) and read by the
/// upload worker through its own connection.
final class UploaderStore {
    let db: Database

    static let migrations: [(name: String, sql: String)] = [
        ("1-uploader", """
            CREATE TABLE queue (
                id INTEGER PRIMARY KEY AUTOINCREMENT, device TEXT NOT NULL, epoch TEXT NOT NULL, seq INTEGER NOT NULL,
                timeMs INTEGER NOT NULL, body TEXT NOT NULL, parked INTEGER NOT NULL DEFAULT 0, UNIQUE (device, epoch, seq)
            );
            CREATE INDEX queue_waiting ON queue(parked, id);
            -- The caps and health read the queue's time span on every pass: by index, not by scan.
            CREATE INDEX queue_by_time ON queue(parked, timeMs);
            CREATE TABLE sync (id INTEGER PRIMARY KEY CHECK (id = 1), config TEXT, authExpired INTEGER NOT NULL DEFAULT 0);
            INSERT INTO sync (id) VALUES (1);
            """),
        // What the phone said beside the point, when the point was queued (the age cap counts from
        // then: a replayed recording is not dropped for its fixes' age), and the batch a point went
        // out in: a retry resends that batch as formed, under its key.
        ("2-uploader-forwarding", """
            ALTER TABLE queue ADD COLUMN altitudeM REAL;
            ALTER TABLE queue ADD COLUMN batteryPct REAL;
            ALTER TABLE queue ADD COLUMN queuedMs INTEGER;
            ALTER TABLE queue ADD COLUMN batch TEXT;
            CREATE INDEX queue_by_queued ON queue(parked, queuedMs);
            """),
        // The batch under way, found by index: every pass looks for it, and
        // without one it scanned every waiting point (a pass took longer the
        // longer the queue, so a backlog drained ever slower).
        ("3-uploader-open-batch", """
            CREATE INDEX queue_open_batch ON queue(batch, id) WHERE batch IS NOT NULL AND parked = 0;
            """),
    ]

    init(db: Database) { self.db = db }

    /// Queues the point once per `(device, epoch, seq)`: a redelivered point
    /// is not queued twice. Its row id (ids only grow: AUTOINCREMENT), or nil
    /// when it was queued before.
    func enqueue(_ message: PointMessage, nowMs: Int64) throws -> Int64? {
        try db.run("""
            INSERT OR IGNORE INTO queue (device, epoch, seq, timeMs, body, altitudeM, batteryPct, queuedMs)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?)
            """, [
            .text(message.device.rawValue), .text(message.epoch ?? ""), .integer(message.point.seq), .integer(message.point.timeMs),
            .utf8(JSONCoding.bytes(message.point)), Self.real(message.measured?.altitudeM), Self.real(message.measured?.batteryPct),
            .integer(nowMs)])
        return db.changes > 0 ? db.lastInsertRowID : nil
    }

    private static func real(_ value: Double?) -> SQLValue { value.map { .real($0) } ?? .null }

    func config() throws -> SyncConfig? { try sync().config }

    /// The config in force and whether its credentials were refused, in one
    /// read. The worker reads it every pass: the text is decoded again only
    /// when it changed (JSONDecoder was two fifths of a pass's own time).
    func sync() throws -> (config: SyncConfig?, authExpired: Bool) {
        let stored = try db.first("SELECT config, authExpired FROM sync WHERE id = 1") { row in
            (text: row.isNull(0) ? nil : row.bytes(0), authExpired: row.int(1) != 0)
        }
        guard let stored, let text = stored.text else { return (nil, stored?.authExpired ?? false) }
        if let decoded, decoded.text == text { return (decoded.config, stored.authExpired) }
        let config = try JSONCoding.decoder.decode(SyncConfig.self, from: Data(text))
        decoded = (text, config)
        return (config, stored.authExpired)
    }

    /// The config as last decoded, with the text it came from.
    private var decoded: (text: [UInt8], config: SyncConfig)?

    /// A new config also lifts an auth expiry: new credentials are the way back.
    func save(_ config: SyncConfig) throws {
        try db.run("UPDATE sync SET config = ?, authExpired = 0 WHERE id = 1", .json(JSONCoding.encode(config)))
    }

    func setAuthExpired() throws { try db.run("UPDATE sync SET authExpired = 1 WHERE id = 1") }

    /// The batch to send: the one formed earlier and not yet delivered, as it
    /// was (a retry), or else a new one of the oldest waiting points, at most
    /// `limit`, under a new key.
    func batch(limit: Int) throws -> (key: String, points: [(id: Int64, point: QueuedPoint)]) {
        let open = try db.first("SELECT batch FROM queue INDEXED BY queue_open_batch WHERE parked = 0 AND batch IS NOT NULL ORDER BY id LIMIT 1") {
            $0.string(0)
        }
        let key: String
        if let open { key = open } else {
            key = "batch-\(UUID().uuidString.lowercased())"
            try db.run("UPDATE queue SET batch = ? WHERE id IN (SELECT id FROM queue WHERE parked = 0 ORDER BY id LIMIT ?)",
                       .text(key), .integer(Int64(limit)))
        }
        let points = try db.query("""
            SELECT id, device, body, epoch, altitudeM, batteryPct FROM queue INDEXED BY queue_open_batch
            WHERE parked = 0 AND batch = ? ORDER BY id
            """, [.text(key)]) { row -> (id: Int64, point: QueuedPoint) in
            guard let device = DeviceID(row.string(1)) else { throw StoreError(code: 0, message: "bad device in queue", sql: nil) }
            let body = row.bytes(2)
            let point = try TrackPoint(flat: body) ?? JSONCoding.decoder.decode(TrackPoint.self, from: Data(body))
            return (row.int64(0), QueuedPoint(device: device, point: point,
                                              epoch: row.string(3), altitudeM: row.optionalDouble(4), batteryPct: row.optionalDouble(5)))
        }
        return (key, points)
    }

    func delete(_ ids: [Int64]) throws {
        try db.transaction { for id in ids { try db.run("DELETE FROM queue WHERE id = ?", .integer(id)) } }
    }

    func park(_ ids: [Int64]) throws {
        try db.transaction { for id in ids { try db.run("UPDATE queue SET parked = 1 WHERE id = ?", .integer(id)) } }
    }

    /// Holds the queue to its caps: at most `maxRecords` waiting, none queued
    /// more than `maxAgeMs` before `nowMs`. Returns how many were dropped, and
    /// how many points wait afterwards, from `known`: the count the caller
    /// keeps, which it counts in the store before it passes one above
    /// `maxRecords` here (dropping must not go by a count kept in memory).
    func cap(maxRecords: Int, maxAgeMs: Int64, nowMs: Int64, known: Int) throws -> (dropped: Int, waiting: Int) {
        var dropped = 0
        var waiting = known
        // Points queued by the release before carry no time: they count as queued now, by this clock
        // (the migration cannot know the injected one). `parked IN (0, 1)` lets it go by index.
        try db.run("UPDATE queue SET queuedMs = ? WHERE parked IN (0, 1) AND queuedMs IS NULL", .integer(nowMs))
        for parked in [0, 1] {
            try db.run("DELETE FROM queue WHERE parked = ? AND queuedMs < ?", .integer(Int64(parked)), .integer(nowMs - maxAgeMs))
            dropped += db.changes
            if parked == 0 { waiting -= db.changes }
        }
        if waiting > maxRecords {
            try db.run("DELETE FROM queue WHERE id IN (SELECT id FROM queue WHERE parked = 0 ORDER BY id LIMIT ?)", .integer(Int64(waiting - maxRecords)))
            dropped += db.changes
            waiting -= db.changes
        }
        return (dropped, waiting)
    }

    /// The points waiting, and the highest row id ever queued, read together
    /// (one statement): every waiting row up to that id is in the count.
    func waitingThrough() throws -> (count: Int, throughID: Int64) {
        try db.first("""
            SELECT (SELECT count(*) FROM queue WHERE parked = 0),
                   coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'queue'), 0)
            """) { ($0.int(0), $0.int64(1)) } ?? (0, 0)
    }
    func oldestWaitingMs() throws -> Int64? { try db.first("SELECT min(timeMs) FROM queue WHERE parked = 0") { $0.optionalInt64(0) } ?? nil }
}

