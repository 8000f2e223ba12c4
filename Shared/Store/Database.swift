import CSQLite
import FoundationEssentials
import Glibc
import TrackerLog

// SQLITE_TRANSIENT tells SQLite to copy bound text/blobs before bind returns.
private let sqliteTransient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

/// One SQLite connection. It owns the C handle and closes it in `deinit`.
/// Not thread-safe by itself: each service confines its database to one
/// serial context (a lock or an actor), as SQLite's own docs recommend.
public final class Database {
    let handle: OpaquePointer
    public let path: String
    private var cache: [String: Statement] = [:]
    private var transactionDepth = 0
    private var batchOpen = false
    /// A writer's checkpoints, on the process's checkpoint thread (nil in memory and read-only).
    private let checkpoints: BackgroundCheckpoints?

    /// Opens (creating if needed) the file at `path` in WAL mode with
    /// `synchronous=NORMAL`: a commit survives a process kill; only an OS
    /// crash may lose the last few. `readOnly` opens a second connection for
    /// queries beside the writer (WAL lets it read while the writer writes).
    /// The page cache a store gets unless told (`sqliteCacheMB`'s default).
    public static let defaultCacheKB = 3_000

    /// SQLite counts every allocation under a process-wide mutex unless told
    /// not to, before its first connection: nothing here reads the counts,
    /// and the lock came to about 1 % of a service's CPU. (A process that
    /// opened SQLite first keeps them; the call then fails, harmlessly.)
    private static let memoryStatisticsOff: Void = { _ = tracker_sqlite3_config_memstatus(0) }()

    /// `logger` says what goes wrong in the background (a checkpoint that failed).
    public init(path: String, readOnly: Bool = false, cacheKB: Int = defaultCacheKB, logger: Logger = Logger(label: "store")) throws {
        _ = Self.memoryStatisticsOff
        var db: OpaquePointer?
        // Created 0600 by us, not 0644 by SQLite: the -wal and -shm files take the
        // database's own mode, and a store may hold secrets (the uploader's headers).
        if !readOnly { Self.createPrivately(path) }
        let flags = (readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) | SQLITE_OPEN_NOMUTEX
        let rc = sqlite3_open_v2(path, &db, flags, nil)
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            if let db { sqlite3_close_v2(db) }
            throw StoreError(code: rc, message: "\(message) (\(path))", sql: nil)
        }
        handle = db
        self.path = path
        checkpoints = readOnly || !Self.isFile(path) ? nil : BackgroundCheckpoints(path: path, logger: logger)
        sqlite3_busy_timeout(db, 5_000)
        if readOnly {
            try execute("PRAGMA query_only=ON")
            try execute("PRAGMA cache_size=-4000")
            return
        }
        if path != ":memory:" { try execute("PRAGMA journal_mode=WAL") }
        try execute("PRAGMA synchronous=NORMAL")
        // Checkpoint every ~4 MB of WAL, mostly on the checkpoint queue (see
        // `CheckpointPlan`), and cut the file back to 4 MB when it starts over.
        if let checkpoints {
            let context = Unmanaged.passUnretained(checkpoints).toOpaque()
            // Replaces SQLite's automatic checkpoint, which is itself a WAL hook.
            sqlite3_wal_hook(db, { context, db, _, frames in
                let checkpoints = Unmanaged<BackgroundCheckpoints>.fromOpaque(context!).takeUnretainedValue()
                if checkpoints.writerCheckpoints(afterCommitLeaving: frames) {
                    checkpoints.record(sqlite3_wal_checkpoint_v2(db, nil, SQLITE_CHECKPOINT_PASSIVE, nil, nil), db)
                }
                return SQLITE_OK
            }, context)
        } else {
            try execute("PRAGMA wal_autocheckpoint=1000")
        }
        try execute("PRAGMA journal_size_limit=4194304")
        // A batch of a few hundred messages should fit in the page cache, or
        // SQLite spills (writes) pages mid-transaction and again at commit.
        // 3 MB (the services' `sqliteCacheMB`) keeps a filter with 10,000
        // devices and an 8 MB device cache under 50 MB: the device cache
        // holds the rows a fix needs (docs/benchmarks/2026-12-06-fleet-cache.md).
        try execute("PRAGMA cache_size=-\(max(100, cacheKB))")
        // Savepoint sub-journals in memory, not in a temporary file per savepoint.
        try execute("PRAGMA temp_store=MEMORY")
        try execute("PRAGMA foreign_keys=ON")
    }

    deinit {
        cache.removeAll()
        // The hook's context must not outlive the checkpoints it points to,
        // and the queue must not open the file again once the writer is gone.
        if let checkpoints {
            sqlite3_wal_hook(handle, nil, nil)
            checkpoints.close()
        }
        sqlite3_close_v2(handle)
    }

    /// Runs one or more statements that return no rows.
    public func execute(_ sql: String) throws {
        var errorMessage: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &errorMessage)
        if rc != SQLITE_OK {
            let message = errorMessage.map { String(cString: $0) } ?? String(cString: sqlite3_errmsg(handle))
            sqlite3_free(errorMessage)
            throw StoreError(code: rc, message: message, sql: sql)
        }
    }

    /// A prepared statement, cached by its SQL text and reset for reuse.
    public func statement(_ sql: String) throws -> Statement {
        if let cached = cache[sql] {
            cached.reset()
            return cached
        }
        let statement = try Statement(database: self, sql: sql)
        cache[sql] = statement
        return statement
    }

    /// A statement owned by the caller, for the few that run on every message:
    /// no lookup (and no hashing of the SQL) per use. `sqlite3_close_v2`
    /// lets it outlive the connection's deinit safely.
    public func prepare(_ sql: String) throws -> Statement {
        try Statement(database: self, sql: sql)
    }

    /// Runs `sql` with `bindings` and returns nothing.
    public func run(_ sql: String, _ bindings: SQLValue...) throws { try run(sql, bindings) }

    /// The same, with bindings assembled at run time.
    public func run(_ sql: String, _ bindings: [SQLValue]) throws {
        let statement = try statement(sql)
        try statement.bind(bindings)
        try statement.runToEnd()
    }

    /// Maps every row of a query.
    public func query<T>(_ sql: String, _ bindings: [SQLValue] = [], map: (Row) throws -> T) throws -> [T] {
        let statement = try statement(sql)
        try statement.bind(bindings)
        var rows: [T] = []
        while let row = try statement.step() { rows.append(try map(row)) }
        return rows
    }

    /// The first row of a query, if any.
    public func first<T>(_ sql: String, _ bindings: [SQLValue] = [], map: (Row) throws -> T) throws -> T? {
        let statement = try statement(sql)
        try statement.bind(bindings)
        defer { statement.reset() }
        return try statement.step().map(map)
    }

    /// Runs `body` in a transaction. Inside an open transaction (or batch) it
    /// runs in a savepoint instead, so a thrown error undoes only `body`'s
    /// own changes and the outer transaction goes on — unless SQLite itself
    /// rolled the whole transaction back (it may, for a full disk or an I/O
    /// error): then the error is rethrown and the batch is gone.
    public func transaction<T>(_ body: () throws -> T) throws -> T {
        if transactionDepth > 0 {
            let name = "s\(transactionDepth)"
            try statement("SAVEPOINT \(name)").runToEnd()
            transactionDepth += 1
            defer { transactionDepth -= 1 }
            do {
                let result = try body()
                try statement("RELEASE \(name)").runToEnd()
                return result
            } catch {
                guard !isAutocommit else {
                    // Nothing left to roll back to: the outer transaction ended with the error.
                    batchOpen = false
                    throw error
                }
                try statement("ROLLBACK TO \(name)").runToEnd()
                try statement("RELEASE \(name)").runToEnd()
                throw error
            }
        }
        try execute("BEGIN IMMEDIATE")
        transactionDepth = 1
        defer { transactionDepth = 0 }
        do {
            let result = try body()
            try execute("COMMIT")
            return result
        } catch {
            if !isAutocommit { try execute("ROLLBACK") }
            throw error
        }
    }

    /// True when no transaction is open, as SQLite itself sees it (after some
    /// errors SQLite rolls back on its own; this is the authority, not our count).
    public var isAutocommit: Bool { sqlite3_get_autocommit(handle) != 0 }

    /// Undoes the open batch, if any (and if SQLite has not already).
    public func rollbackBatch() throws {
        defer { batchOpen = false; transactionDepth = 0 }
        guard batchOpen || transactionDepth > 0, !isAutocommit else { return }
        try execute("ROLLBACK")
    }

    /// Writes the WAL back into the database file and truncates it, so the
    /// `.sqlite` file alone holds everything (graceful stop, backups).
    public func checkpoint() throws {
        guard let checkpoints else { return try execute("PRAGMA wal_checkpoint(TRUNCATE)") }
        try checkpoints.whileStopped { try execute("PRAGMA wal_checkpoint(TRUNCATE)") }
    }

    /// SQLite's quick structural check; nil when the file is sound.
    public func quickCheck() throws -> String? {
        let result = try first("PRAGMA quick_check(1)") { $0.string(0) } ?? "no answer"
        return result == "ok" ? nil : result
    }

    /// A path SQLite opens as a file: not an in-memory or a temporary store.
    static func isFile(_ path: String) -> Bool { path != ":memory:" && !path.isEmpty }

    /// Makes the file 0600 if it does not exist yet; an existing one of ours is tightened to 0600.
    static func createPrivately(_ path: String) {
        guard isFile(path) else { return }
        let fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
        if fd >= 0 { close(fd); return }
        // Present already: a store an earlier version made 0644 loses the group and world bits.
        makePrivate(path)
    }

    /// A file or directory of ours loses its group and world bits (one an
    /// earlier version made too open); another user's is left as it is.
    /// False only when changing them failed, `errno` saying why.
    @discardableResult
    public static func makePrivate(_ path: String) -> Bool {
        var info = stat()
        guard stat(path, &info) == 0, info.st_uid == getuid(), info.st_mode & 0o077 != 0 else { return true }
        return chmod(path, info.st_mode & 0o700) == 0
    }

    /// Opens a transaction that stays open across calls until `commitBatch`:
    /// several messages, one commit. Does nothing if one is open already.
    public func openBatch() throws {
        guard transactionDepth == 0 else { return }
        try execute("BEGIN IMMEDIATE")
        transactionDepth = 1
        batchOpen = true
    }

    public var hasOpenBatch: Bool { batchOpen }

    /// Commits the open batch, if any. If the commit fails the batch is
    /// rolled back (or already was, by SQLite): it never lingers half open.
    public func commitBatch() throws {
        guard batchOpen else { return }
        do {
            try execute("COMMIT")
        } catch {
            // The commit's own error is the one to report; undo what is left of the batch.
            try? rollbackBatch()
            throw error
        }
        batchOpen = false
        transactionDepth = 0
    }

    public var changes: Int { Int(sqlite3_changes(handle)) }
    public var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }

    func error(_ rc: Int32, sql: String?) -> StoreError {
        StoreError(code: rc, message: String(cString: sqlite3_errmsg(handle)), sql: sql)
    }
}

/// A value bound to or read from SQLite.
public enum SQLValue: Sendable, Equatable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    /// Text given as its UTF-8 bytes (a JSON body), bound without a String.
    case utf8([UInt8])
    case blob([UInt8])

    public static func int(_ v: Int64?) -> SQLValue { v.map(SQLValue.integer) ?? .null }
    public static func int(_ v: Int?) -> SQLValue { v.map { .integer(Int64($0)) } ?? .null }
    public static func double(_ v: Double?) -> SQLValue { v.map(SQLValue.real) ?? .null }
    public static func string(_ v: String?) -> SQLValue { v.map(SQLValue.text) ?? .null }
    public static func bool(_ v: Bool?) -> SQLValue { v.map { .integer($0 ? 1 : 0) } ?? .null }
    public static func json(_ data: Data) -> SQLValue { .text(String(decoding: data, as: UTF8.self)) }
}

/// A prepared statement owned by its database's cache.
public final class Statement {
    let pointer: OpaquePointer
    let sql: String
    unowned let database: Database

    init(database: Database, sql: String) throws {
        var pointer: OpaquePointer?
        let rc = sqlite3_prepare_v3(database.handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &pointer, nil)
        guard rc == SQLITE_OK, let pointer else { throw database.error(rc, sql: sql) }
        self.pointer = pointer
        self.sql = sql
        self.database = database
    }

    deinit { sqlite3_finalize(pointer) }

    func reset() {
        sqlite3_reset(pointer)
        sqlite3_clear_bindings(pointer)
    }

    /// Resets, binds and runs a statement that returns no rows.
    public func run(_ values: SQLValue...) throws { try run(values) }

    public func run(_ values: [SQLValue]) throws {
        reset()
        try bind(values)
        try runToEnd()
    }

    /// Resets, binds and maps the first row, if any.
    public func first<T>(_ values: SQLValue..., map: (Row) throws -> T) throws -> T? {
        reset()
        try bind(values)
        defer { sqlite3_reset(pointer) }
        return try step().map(map)
    }

    /// Resets, binds and tells whether the query returns a row.
    public func exists(_ values: SQLValue...) throws -> Bool {
        reset()
        try bind(values)
        defer { sqlite3_reset(pointer) }
        return try step() != nil
    }

    public func bind(_ values: [SQLValue]) throws {
        for (offset, value) in values.enumerated() {
            let index = Int32(offset + 1)
            let rc: Int32
            switch value {
            case .null: rc = sqlite3_bind_null(pointer, index)
            case .integer(let v): rc = sqlite3_bind_int64(pointer, index, v)
            case .real(let v): rc = sqlite3_bind_double(pointer, index, v)
            case .text(let v): rc = sqlite3_bind_text(pointer, index, v, -1, sqliteTransient)
            case .utf8(let v) where v.isEmpty: rc = sqlite3_bind_text(pointer, index, "", 0, sqliteTransient)
            case .utf8(let v): rc = v.withUnsafeBufferPointer { bytes in
                bytes.withMemoryRebound(to: CChar.self) { sqlite3_bind_text(pointer, index, $0.baseAddress, Int32($0.count), sqliteTransient) }
            }
            case .blob(let v): rc = v.withUnsafeBytes {
                sqlite3_bind_blob(pointer, index, $0.baseAddress, Int32($0.count), sqliteTransient)
            }
            }
            guard rc == SQLITE_OK else { throw database.error(rc, sql: sql) }
        }
    }

    /// The next row, or nil when done.
    public func step() throws -> Row? {
        let rc = sqlite3_step(pointer)
        switch rc {
        case SQLITE_ROW: return Row(statement: self)
        case SQLITE_DONE: return nil
        default:
            let error = database.error(rc, sql: sql)
            sqlite3_reset(pointer)
            throw error
        }
    }

    public func runToEnd() throws {
        while try step() != nil {}
        sqlite3_reset(pointer)
    }
}

/// The current row of a statement; valid until the next step.
public struct Row {
    let statement: Statement

    public func isNull(_ i: Int32) -> Bool { sqlite3_column_type(statement.pointer, i) == SQLITE_NULL }
    public func int64(_ i: Int32) -> Int64 { sqlite3_column_int64(statement.pointer, i) }
    public func int(_ i: Int32) -> Int { Int(int64(i)) }
    public func double(_ i: Int32) -> Double { sqlite3_column_double(statement.pointer, i) }
    public func optionalInt64(_ i: Int32) -> Int64? { isNull(i) ? nil : int64(i) }
    public func optionalDouble(_ i: Int32) -> Double? { isNull(i) ? nil : double(i) }
    public func string(_ i: Int32) -> String {
        guard let c = sqlite3_column_text(statement.pointer, i) else { return "" }
        return String(cString: c)
    }
    public func optionalString(_ i: Int32) -> String? { isNull(i) ? nil : string(i) }
    public func data(_ i: Int32) -> Data {
        let count = Int(sqlite3_column_bytes(statement.pointer, i))
        guard count > 0, let bytes = sqlite3_column_blob(statement.pointer, i) else { return Data() }
        return Data(bytes: bytes, count: count)
    }
    /// The column's bytes (text or blob), for a parser that reads bytes.
    public func bytes(_ i: Int32) -> [UInt8] {
        let count = Int(sqlite3_column_bytes(statement.pointer, i))
        guard count > 0, let bytes = sqlite3_column_blob(statement.pointer, i) else { return [] }
        return Array(UnsafeRawBufferPointer(start: bytes, count: count))
    }
    /// The column as stored, whatever its type (a copy of rows between stores).
    public func value(_ i: Int32) -> SQLValue {
        switch sqlite3_column_type(statement.pointer, i) {
        case SQLITE_NULL: .null
        case SQLITE_INTEGER: .integer(int64(i))
        case SQLITE_FLOAT: .real(double(i))
        case SQLITE_BLOB: .blob(bytes(i))
        default: .utf8(bytes(i))
        }
    }
}
