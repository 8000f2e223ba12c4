import Foundation
import Store
import Testing

@Suite struct StoreTests {
    func temporaryPath() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("store-\(UUID().uuidString).sqlite").path
    }

    /// A store may hold secrets (the uploader's headers): no one but its owner reads it or its WAL.
    @Test func aStoreAndItsWriteAheadLogAreTheOwnersAlone() throws {
        let path = temporaryPath()
        let db = try Database(path: path)
        try db.run("CREATE TABLE t (a TEXT)")
        try db.run("INSERT INTO t VALUES ('secret')")
        func mode(_ p: String) throws -> Int { (try FileManager.default.attributesOfItem(atPath: p)[.posixPermissions] as? NSNumber)?.intValue ?? -1 }
        #expect(try mode(path) == 0o600)
        #expect(try mode(path + "-wal") == 0o600)
        // One an earlier version made 0644 is tightened when opened.
        let old = temporaryPath()
        #expect(FileManager.default.createFile(atPath: old, contents: nil, attributes: [.posixPermissions: 0o644]))
        _ = try Database(path: old)
        #expect(try mode(old) == 0o600)
    }

    @Test func migrationsRunOnceAndInOrder() throws {
        let path = temporaryPath()
        var migrator = Migrator()
        migrator.register("1-create", "CREATE TABLE t (a INTEGER)")
        migrator.register("2-seed", "INSERT INTO t VALUES (1)")
        do {
            let db = try Database(path: path)
            #expect(try migrator.migrate(db) == ["1-create", "2-seed"])
        }
        let db = try Database(path: path)
        #expect(try migrator.migrate(db) == [])
        #expect(try db.query("SELECT count(*) FROM t") { $0.int(0) } == [1])
        #expect(try db.first("PRAGMA journal_mode") { $0.string(0) } == "wal")
    }

    @Test func aFailedMigrationLeavesNothingBehind() throws {
        let db = try Database(path: temporaryPath())
        var migrator = Migrator()
        migrator.register("bad", "CREATE TABLE x (a); INSERT INTO nowhere VALUES (1)")
        #expect(throws: StoreError.self) { try migrator.migrate(db) }
        #expect(try db.query("SELECT name FROM sqlite_master WHERE name = 'x'") { $0.string(0) } == [])
    }

    @Test func transactionsRollBackOnError() throws {
        let db = try Database(path: temporaryPath())
        try db.execute("CREATE TABLE t (a INTEGER PRIMARY KEY)")
        struct Boom: Error {}
        #expect(throws: Boom.self) {
            try db.transaction {
                try db.run("INSERT INTO t VALUES (?)", .integer(1))
                throw Boom()
            }
        }
        #expect(try db.query("SELECT count(*) FROM t") { $0.int(0) } == [0])
    }

    @Test func errorsCarryCodeMessageAndSQL() throws {
        let db = try Database(path: temporaryPath())
        try db.execute("CREATE TABLE t (a INTEGER PRIMARY KEY)")
        try db.run("INSERT INTO t VALUES (?)", .integer(1))
        do {
            try db.run("INSERT INTO t VALUES (?)", .integer(1))
            Issue.record("expected a constraint error")
        } catch let error as StoreError {
            #expect(error.code == 19)  // SQLITE_CONSTRAINT
            #expect(error.message.contains("UNIQUE"))
            #expect(error.sql == "INSERT INTO t VALUES (?)")
        }
    }

    @Test func valuesRoundTrip() throws {
        let db = try Database(path: temporaryPath())
        try db.execute("CREATE TABLE v (i INTEGER, r REAL, s TEXT, b BLOB, n TEXT)")
        try db.run("INSERT INTO v VALUES (?, ?, ?, ?, ?)", .integer(.max), .real(1.5), .text("héllo"), .blob([0, 1, 255]), .null)
        let row = try db.first("SELECT i, r, s, b, n FROM v") { r in
            (r.int64(0), r.double(1), r.string(2), [UInt8](r.data(3)), r.optionalString(4))
        }
        #expect(row?.0 == .max && row?.1 == 1.5 && row?.2 == "héllo" && row?.3 == [0, 1, 255] && row?.4 == nil)
    }

    @Test func preparedStatementsAreReusedWithFreshBindings() throws {
        let db = try Database(path: temporaryPath())
        try db.execute("CREATE TABLE t (a INTEGER)")
        try db.transaction {
            for i in 0..<1_000 { try db.run("INSERT INTO t VALUES (?)", .integer(Int64(i))) }
        }
        #expect(try db.query("SELECT sum(a) FROM t") { $0.int(0) } == [499_500])
    }
}
