extension Migrator {
    /// SQL that gives `table` a new shape with every row kept: the new table
    /// is made by `create` under a temporary name and filled with `columns`
    /// (in `order`, when given); the old one is dropped with all its
    /// indexes, whatever their names, and the new one takes its name. Its
    /// indexes are the caller's to create after this.
    public static func rebuild(_ table: String, columns: String, order: String? = nil, create: (String) -> String) -> String {
        let reshaped = "\(table)_reshaped"
        return """
            \(create(reshaped))
            INSERT INTO \(reshaped) (\(columns)) SELECT \(columns) FROM \(table)\(order.map { " ORDER BY \($0)" } ?? "");
            DROP TABLE \(table);
            ALTER TABLE \(reshaped) RENAME TO \(table);
            """
    }
}

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
