import Foundation
import Bus
import Store

/// `tracker-bench store`: the gateway's per-fix transaction alone, in process.
enum StoreBench {
    static func run(count: Int) throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("store-bench-\(UUID().uuidString).sqlite").path
        let db = try Database(path: path)
        try db.execute("""
            CREATE TABLE devices (device TEXT PRIMARY KEY, lastSeq INTEGER, sessionID TEXT, lastFixMs INTEGER, lastReceivedMs INTEGER);
            CREATE TABLE raw (device TEXT, seq INTEGER, timeMs INTEGER, sessionID TEXT, body TEXT, PRIMARY KEY(device, seq)) WITHOUT ROWID;
            CREATE UNIQUE INDEX raw_t ON raw(device, timeMs);
            """)
        let body = String(repeating: "x", count: 280)
        let start = ContinuousClock.now
        for i in 0..<Int64(count) {
            try db.transaction {
                _ = try db.first("SELECT 1 FROM raw WHERE device = ? AND timeMs = ?", [.text("bench1"), .integer(i * 1000)]) { _ in true }
                try db.run("INSERT INTO raw (device, seq, timeMs, sessionID, body) VALUES (?, ?, ?, ?, ?)",
                           .text("bench1"), .integer(i), .integer(i * 1000), .text("s"), .text(body))
                try db.run("""
                    INSERT INTO devices (device, lastSeq, sessionID, lastFixMs, lastReceivedMs) VALUES (?, ?, ?, ?, ?)
                    ON CONFLICT(device) DO UPDATE SET lastSeq = excluded.lastSeq, lastFixMs = excluded.lastFixMs,
                        lastReceivedMs = excluded.lastReceivedMs
                    """, .text("bench1"), .integer(i), .text("s"), .integer(i), .integer(i))
            }
        }
        let seconds = (ContinuousClock.now - start).seconds
        print(String(format: "store: %.1f µs per fix transaction (%.0f/s)", seconds / Double(count) * 1e6, Double(count) / seconds))
    }
}
