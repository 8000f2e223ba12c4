import Foundation

/// A fresh SQLite path in the temporary directory for one test (or one
/// suite instance); the database, its WAL and its shared memory are removed
/// when this goes.
public final class TemporaryDatabase: Sendable {
    public let path: String

    /// `name` starts the file's name, so that a leftover says whose it was.
    public init(_ name: String) {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("\(name)-\(UUID().uuidString).sqlite").path
    }

    deinit {
        for suffix in ["", "-wal", "-shm"] {
            // A file SQLite never made (no WAL yet) is nothing to remove.
            try? FileManager.default.removeItem(atPath: path + suffix)
        }
    }
}
