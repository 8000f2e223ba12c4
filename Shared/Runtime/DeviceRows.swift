import Model
import Store

/// A service's per-device rows between commits: loaded on first use, changed
/// in memory as messages are handled, and written once per batch, inside the
/// batch's own commit (so the rows always match what the batch stored).
/// Not thread-safe: the owning service calls it under its lock.
public final class DeviceRows<Row> {
    private var rows: [DeviceID: Row] = [:]
    private var dirty: Set<DeviceID> = []
    private let load: (DeviceID) throws -> Row
    private let save: (DeviceID, Row) throws -> Void

    public init(load: @escaping (DeviceID) throws -> Row, save: @escaping (DeviceID, Row) throws -> Void) {
        self.load = load
        self.save = save
    }

    /// The device's current row (from memory, else from the store).
    public func row(_ device: DeviceID) throws -> Row {
        if let row = rows[device] { return row }
        let row = try load(device)
        rows[device] = row
        return row
    }

    /// Records a changed row; it is written at the next commit.
    public func update(_ device: DeviceID, _ row: Row) {
        rows[device] = row
        dirty.insert(device)
    }

    /// Every row in memory (for periodic sweeps).
    public var all: [(DeviceID, Row)] { rows.map { ($0.key, $0.value) } }

    /// Writes the changed rows and commits the open batch (see `BatchCommit`).
    public func commit(_ db: Database, logger: Logger, counters: HealthCounters) {
        if !dirty.isEmpty { try? db.openBatch() }
        BatchCommit.commit(db, logger: logger, counters: counters) {
            for device in dirty { if let row = rows[device] { try save(device, row) } }
        }
        dirty.removeAll()
    }
}
