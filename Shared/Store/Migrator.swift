/// Named migrations, each run once and in its own transaction. The names
/// applied are kept in `_migrations`, so adding one to the end is safe.
public struct Migrator {
    private var migrations: [(name: String, sql: String)] = []

    public init() {}

    public mutating func register(_ name: String, _ sql: String) {
        precondition(!migrations.contains { $0.name == name }, "duplicate migration \(name)")
        migrations.append((name, sql))
    }

    /// Applies the migrations not yet applied; returns their names.
    @discardableResult
    public func migrate(_ db: Database) throws -> [String] {
        try db.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, appliedAt INTEGER NOT NULL)")
        let applied = Set(try db.query("SELECT name FROM _migrations") { $0.string(0) })
        var ran: [String] = []
        for migration in migrations where !applied.contains(migration.name) {
            try db.transaction {
                try db.execute(migration.sql)
                try db.run("INSERT INTO _migrations (name, appliedAt) VALUES (?, strftime('%s','now'))",
                           .text(migration.name))
            }
            ran.append(migration.name)
        }
        return ran
    }
}
