import FoundationEssentials
import GatewayCore
import Model
import Runtime
import Store

/// The gateway's own tables: the sessions and the raw-fix ring (a DeviceLog
/// that doubles as the outbox of `raw`). Device rows live in the host's table.
final class GatewayStore {
    let db: Database
    let ring: DeviceLog
    /// The rowid the idle sweep's next slice of rows starts after.
    private var sweepCursor: Int64 = 0

    static let migrations: [(name: String, sql: String)] = [
        ("1-gateway", HostStore.legacyDevicesTable("sessionID TEXT, lastFixMs INTEGER, lastReceivedMs INTEGER") + """
            CREATE TABLE sessions (
                id TEXT PRIMARY KEY, device TEXT NOT NULL, tag TEXT, startMs INTEGER NOT NULL, endMs INTEGER, auto INTEGER NOT NULL
            );
            CREATE INDEX sessions_by_device ON sessions(device, startMs);
            """ + DeviceLog.schema("raw_fixes", uniqueTime: true)),
        // A session index cost one page of WAL on every fix's commit; session
        // queries are diagnostics and scan the device's own key range instead.
        ("2-drop-session-index", "DROP INDEX IF EXISTS raw_fixes_by_session"),
        // Device rows move into the host's table (one JSON row per device);
        // a store written by an earlier version keeps its numbering and sessions.
        ("3-host-rows", """
            INSERT OR IGNORE INTO host_devices (device, row, inputs, ackedThrough)
            SELECT d.device,
                   json_object('lastSeq', d.lastSeq, 'sessions', json_object(
                       'current', json(CASE WHEN s.id IS NULL THEN NULL ELSE json_object(
                           'id', s.id, 'device', s.device, 'tag', s.tag, 'startMs', s.startMs, 'endMs', s.endMs,
                           'auto', json(CASE s.auto WHEN 0 THEN 'false' ELSE 'true' END)) END),
                       'lastFixMs', d.lastFixMs, 'lastReceivedMs', d.lastReceivedMs)),
                   '{}', d.ackedThrough
            FROM devices d LEFT JOIN sessions s ON s.id = d.sessionID;
            DROP TABLE devices;
            """),
        // The devices each OwnTracks user has (maxDevicesPerAccount); those of an
        // earlier version counted as far as their id tells (the user before the first dot).
        ("4-account-devices", """
            CREATE TABLE account_devices (account TEXT NOT NULL, device TEXT NOT NULL, PRIMARY KEY (account, device)) WITHOUT ROWID;
            INSERT OR IGNORE INTO account_devices (account, device)
            SELECT substr(device, 1, instr(device, '.') - 1), device FROM host_devices WHERE instr(device, '.') > 1;
            """),
        // The OwnTracks device name as it came (the account is the user name as it came), so every
        // id gives its names back; rows of earlier versions have none until their device is next seen.
        ("5-owntracks-names", """
            ALTER TABLE account_devices ADD COLUMN name TEXT;
            CREATE INDEX account_devices_by_device ON account_devices(device);
            """),
        // The regions each OwnTracks app defined (its waypoints), by the key that survives a rename.
        ("6-owntracks-regions", """
            CREATE TABLE owntracks_regions (
                device TEXT NOT NULL, key TEXT NOT NULL, name TEXT NOT NULL, latitude REAL, longitude REAL, radiusM REAL,
                regionID TEXT, createdS INTEGER, updatedMs INTEGER NOT NULL, PRIMARY KEY (device, key)
            ) WITHOUT ROWID;
            """),
        // The ring becomes append-ordered (DeviceLog): a fix's body goes to the table's end, not into its device's pages.
        ("7-append-ordered-ring", DeviceLog.reshape("raw_fixes", uniqueTime: true)),
    ]

    // MARK: OwnTracks regions

    /// The regions a device's app defined, by key.
    static func regions(_ db: Database, of device: DeviceID) throws -> [StoredRegion] {
        try db.query("""
            SELECT key, name, latitude, longitude, radiusM, regionID, createdS, updatedMs FROM owntracks_regions
            WHERE device = ? ORDER BY key
            """, [.text(device.rawValue)]) { row in
            StoredRegion(region: OwnTracksRegion(name: row.string(1), latitude: row.optionalDouble(2), longitude: row.optionalDouble(3),
                                                 radiusM: row.optionalDouble(4), regionID: row.optionalString(5), createdS: row.optionalInt64(6)),
                         updatedMs: row.int64(7))
        }
    }

    func saveRegion(_ region: OwnTracksRegion, of device: DeviceID, atMs: Int64) throws {
        try db.run("""
            INSERT OR REPLACE INTO owntracks_regions (device, key, name, latitude, longitude, radiusM, regionID, createdS, updatedMs)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            """, .text(device.rawValue), .text(region.key), .text(region.name), .double(region.latitude), .double(region.longitude),
            .double(region.radiusM), .string(region.regionID), .int(region.createdS), .integer(atMs))
    }

    func removeRegion(_ key: String, of device: DeviceID) throws {
        try db.run("DELETE FROM owntracks_regions WHERE device = ? AND key = ?", .text(device.rawValue), .text(key))
    }

    /// The OwnTracks user and device name a device was made from (`name` nil: a row of an earlier version).
    func owner(of device: DeviceID) throws -> (account: String, name: String?)? {
        try db.first("SELECT account, name FROM account_devices WHERE device = ? LIMIT 1", [.text(device.rawValue)]) {
            ($0.string(0), $0.optionalString(1))
        }
    }

    /// `device` is OwnTracks' `{account}/{name}` from now on (a row of an earlier version is replaced).
    func claim(_ device: DeviceID, account: String, name: String) throws {
        try db.run("DELETE FROM account_devices WHERE device = ?", .text(device.rawValue))
        try db.run("INSERT INTO account_devices (account, device, name) VALUES (?, ?, ?)", .text(account), .text(device.rawValue), .text(name))
    }

    func deviceCount(of account: String) throws -> Int {
        try db.first("SELECT count(*) FROM account_devices WHERE account = ?", [.text(account)]) { $0.int(0) } ?? 0
    }


    /// The sessions kept: `sessionsPerDevice` a device, `sessionsTotal` in all.
    let sessionHistory: HistoryRetention

    init(db: Database, sessionsPerDevice: Int = 10_000, sessionsTotal: Int = 1_000_000) throws {
        self.db = db
        ring = try DeviceLog(db: db, table: "raw_fixes")
        sessionHistory = try HistoryRetention(db: db, table: "sessions", orderColumn: "startMs",
                                              keepPerDevice: sessionsPerDevice, maxTotal: sessionsTotal)
    }

    // MARK: Sessions

    /// A new session: the device's oldest beyond what it keeps go. Returns
    /// whether the sessions were cut to their total.
    func openSession(_ s: Session) throws -> Bool {
        try saveSession(s)
        let cut = try sessionHistory.added()
        try sessionHistory.trim(s.device)
        return cut
    }

    func saveSession(_ s: Session) throws {
        try db.run("""
            INSERT INTO sessions (id, device, tag, startMs, endMs, auto) VALUES (?, ?, ?, ?, ?, ?)
            ON CONFLICT(id) DO UPDATE SET endMs = excluded.endMs
            """, .text(s.id), .text(s.device.rawValue), .string(s.tag), .integer(s.startMs), .int(s.endMs), .bool(s.auto ?? false))
    }

    static func session(_ db: Database, id: String) throws -> Session? {
        try db.first("SELECT id, device, tag, startMs, endMs, auto FROM sessions WHERE id = ?", [.text(id)], map: Self.session) ?? nil
    }

    /// The device's sessions as its stored tables tell them, for a device
    /// whose row could not be read: its newest session still open, with the
    /// newest fix's time in it and when the newest raw fix arrived (from the ring).
    func sessionsFromTables(of device: DeviceID) throws -> DeviceSessions {
        let open = try db.first("""
            SELECT id, device, tag, startMs, endMs, auto FROM sessions WHERE device = ? AND endMs IS NULL
            ORDER BY startMs DESC, id DESC LIMIT 1
            """, [.text(device.rawValue)], map: Self.session) ?? nil
        guard let open else { return DeviceSessions() }
        let lastFixMs = try db.first("SELECT max(timeMs) FROM raw_fixes WHERE device = ? AND sessionID = ?",
                                     [.text(device.rawValue), .text(open.id)]) { $0.optionalInt64(0) } ?? nil
        let lastReceivedMs = try db.first("""
            SELECT json_extract(body, '$.receivedMs') FROM raw_fixes WHERE device = ? ORDER BY seq DESC LIMIT 1
            """, [.text(device.rawValue)]) { $0.optionalInt64(0) } ?? nil
        return DeviceSessions(current: open, lastFixMs: lastFixMs, lastReceivedMs: lastReceivedMs)
    }

    /// Sessions overlapping [fromMs, toMs], oldest first.
    static func sessions(_ db: Database, _ device: DeviceID, fromMs: Int64?, toMs: Int64?) throws -> [Session] {
        try db.query("""
            SELECT id, device, tag, startMs, endMs, auto FROM sessions
            WHERE device = ? AND (endMs IS NULL OR endMs >= ?) AND startMs <= ?
            ORDER BY startMs, id
            """, [.text(device.rawValue), .integer(fromMs ?? .min), .integer(toMs ?? .max)], map: Self.session)
            .compactMap { $0 }
    }

    /// Devices whose stored row matches, read from the next `1/slices` (slices ≥ 1) of the
    /// rows (one per device, by rowid, wrapping round): each row is read once
    /// every `slices` calls. Reading every row in one call stalled the network
    /// thread for 15–25 ms with 10,000 devices, and ten times that with
    /// 100,000. A row that does not read is left to the load that will say so
    /// when its device speaks.
    func devices(inNextSliceOf slices: Int, whoseRow matches: (GatewayRow) -> Bool) throws -> [DeviceID] {
        guard let maxID = try db.first("SELECT max(id) FROM host_devices", map: { $0.optionalInt64(0) }) ?? nil else { return [] }
        if sweepCursor >= maxID { sweepCursor = 0 }
        let width = (maxID + Int64(slices) - 1) / Int64(slices)
        let from = sweepCursor, through = min(maxID, from + width)
        sweepCursor = through
        return try db.query("SELECT device, row FROM host_devices WHERE id > ? AND id <= ?", [.integer(from), .integer(through)]) {
            ($0.string(0), $0.data(1))
        }.compactMap { device, stored in
            guard let row = try? GatewayRow.restored(from: stored, using: JSONCoding.decoder), matches(row) else { return nil }
            return DeviceID(device)
        }
    }

    static func session(_ row: Row) -> Session? {
        guard let device = DeviceID(row.string(1)) else { return nil }
        return Session(id: row.string(0), device: device, tag: row.optionalString(2), startMs: row.int64(3),
                       endMs: row.optionalInt64(4), auto: row.int64(5) != 0)
    }
}
