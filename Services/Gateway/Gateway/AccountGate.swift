import Bus
import FoundationEssentials
import GatewayCore
import Model
import Runtime
import Store
import TrackerLog

/// The partitioned gateway's ingress gate: `maxDevicesPerAccount` across
/// every partition. A user's devices hash to different partitions, and each
/// partition knows only its own, so the ingress, which sees every OwnTracks
/// message first, keeps which devices each user has (in its store, which
/// moves with the ingress) and forwards nothing of a new device past the
/// limit. The partition then still checks its own names and conflicts.
///
/// A device counts from its first message under the user, readable or not
/// (the partition counts it once one is stored): the ingress reads no payload.
final class AccountGate: IngressGate {
    static let migrations: [(name: String, sql: String)] = [
        ("1-account-devices", """
            CREATE TABLE account_devices (device TEXT PRIMARY KEY, account TEXT NOT NULL) WITHOUT ROWID;
            CREATE INDEX account_devices_by_account ON account_devices(account);
            """),
    ]

    private let db: Database
    private let topics: Topics
    private let logger: Logger
    private let max: Int
    /// `{ownTracksTopic}/`
    private let ownTracksRoot: String
    private let find: Statement
    private let count: Statement
    private let insert: Statement
    /// Devices known to be their account's (bounded): no store read for them.
    private var known: Set<DeviceID> = []
    /// Devices refused already (bounded): counted again, not announced again.
    private var refused: Set<DeviceID> = []

    init(_ context: IngressGateContext, max: Int) throws {
        let db = context.db
        var migrator = Migrator()
        for (name, sql) in Self.migrations { migrator.register(name, sql) }
        try migrator.migrate(db)
        self.db = db; self.topics = context.topics; self.logger = context.logger; self.max = max
        ownTracksRoot = "\(context.topics.ownTracksPrefix)/"
        find = try db.prepare("SELECT 1 FROM account_devices WHERE device = ?")
        count = try db.prepare("SELECT count(*) FROM account_devices WHERE account = ?")
        insert = try db.prepare("INSERT INTO account_devices (device, account) VALUES (?, ?)")
    }

    func check(_ message: MQTTMessage) -> IngressRefusal? {
        // Most of what the ingress takes is not OwnTracks': told by its first level alone.
        guard message.topic.hasPrefix(ownTracksRoot) else { return nil }
        // What creates no device in the partition creates none here: Tracker's own friend positions
        // (`parse` says `.other`), a command to the app, an empty name (refused there), an empty
        // payload (a retained message cleared).
        let device: DeviceID
        switch topics.parse(message.topic) {
        case .ownTracks(let id): device = id
        case .ownTracksSubtopic(let id, let sub) where sub != "cmd": device = id
        default: return nil
        }
        if known.contains(device) { return nil }
        guard let (user, name) = topics.ownTracksNames(message.topic), !user.isEmpty, !name.isEmpty,
              !message.payload.allSatisfy(FixParser.isWhitespace) else { return nil }
        do {
            if try find.exists(.text(device.rawValue)) { return remember(device) }
            let devices = try count.first(.text(user)) { $0.int(0) } ?? 0
            guard devices < max else {
                let first = refused.insert(device).inserted
                if refused.count > 10_000 { refused.removeAll() }
                return IngressRefusal(device: device, refusal: InputRefusal(.limitReached,
                    "maxDevicesPerAccount: account '\(user.prefix(64))' has \(devices) devices already (the limit is \(max)); "
                        + "\(device) is not tracked", announce: first))
            }
            try insert.run(.text(device.rawValue), .text(user))
            return remember(device)
        } catch {
            // Forwarded all the same: the partition's own count still holds for the devices it has.
            logger.error("the ingress's account store failed; the device is forwarded unchecked", ["device": device.rawValue, "error": "\(error)"])
            return nil
        }
    }

    /// Every OwnTracks device a partition's store has, counted for its account.
    func absorb(partitionStore: Database) throws {
        let owned = try partitionStore.query("SELECT device, account FROM account_devices") { ($0.string(0), $0.string(1)) }
        let add = try db.prepare("INSERT OR IGNORE INTO account_devices (device, account) VALUES (?, ?)")
        try db.transaction {
            for (device, account) in owned { try add.run(.text(device), .text(account)) }
        }
    }

    private func remember(_ device: DeviceID) -> IngressRefusal? {
        if known.count > 100_000 { known.removeAll() }
        known.insert(device)
        return nil
    }
}
