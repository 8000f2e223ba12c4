import Bus
import FoundationEssentials
import TrackerLog
import Model
import Runtime
import Store
import UploaderCore

struct UploaderSettings {
    /// How long `syncNow` waits for the attempt it asked for.
    var syncNowTimeoutMs: Int
    /// The file's `sync` object, if any: applied at start when it differs
    /// from the config in force (a restart with new credentials ends an auth expiry).
    var sync: SyncConfig?

    init(_ reader: SettingsReader) throws {
        syncNowTimeoutMs = try reader.int("syncNowTimeoutSec", default: 60, in: 1...3_600) * 1000
        if let value = reader.json("sync") {
            do {
                sync = try value.decode(SyncConfig.self).validated()
            } catch let error as SyncConfigError {
                throw ConfigError("sync.\(error.setting)", error.problem)
            } catch let error as DecodingError {
                throw ConfigError("sync", DecodingErrorText.describe(error, root: "sync"))
            }
        }
    }
}

/// Queues every accepted point durably and delivers it to the customer's
/// endpoint: the uploader's table for the host, its HTTP loop beside it.
enum UploaderService {
    /// The uploader keeps nothing per device beyond the host's watermarks:
    /// its row is empty, stored in the binary form every service's row takes
    /// (JSON `{}` rows of earlier releases still read). Written once per
    /// point with a large fleet: 0.07 µs, against 0.7–0.8 µs as JSON.
    struct Row: BinaryStoredRow {
        static let binaryVersion: UInt64 = 1
        static let binaryName = "the uploader row"
        init() {}
        func writeFields(to w: inout BinaryWriter) {}
        init(readingFieldsFrom r: inout BinaryReader) throws {}
    }

    static func definition(_ settings: UploaderSettings, topics: Topics, clock: any WallClock, logger: Logger,
                           transport: any HTTPTransport = CurlTransport()) -> ServiceDefinition<Row> {
        let turns = UploadTurns()  // one for every partition this instance runs
        return ServiceDefinition(name: "uploader", migrations: UploaderStore.migrations, rows: .binary(fresh: { Row() })) { db in
            let store = UploaderStore(db: db)
            if let sync = settings.sync, try store.config() != sync { try store.save(sync) }
            // Made with the bus and counters by the host, before any message can reach the routes below.
            let made = WorkerSlot()
            return Routes(
                inputs: [
                    .sequenced("points", decode: { try PointMessage(flat: $0) ?? JSONCoding.decoder.decode(PointMessage.self, from: Data($0)) }) { message, work in
                        // In the batch that records the point's seq: queued exactly once.
                        let queued = try store.enqueue(message, nowMs: work.nowMs)
                        work.processed()
                        // Once committed the worker can see it: health counts it, a pass sends it.
                        if let id = queued { work.afterCommit { made.worker?.noteQueued(id: id) } }
                    },
                ],
                commands: [
                    CommandRoute("configureSync", scope: .fleet) { command, _ in
                        try configure(command, store: store, worker: made.worker)
                    },
                    .waiting("syncNow", scope: .fleet) { _ in
                        guard let worker = made.worker,
                              let outcome = await worker.syncNow(timeout: .milliseconds(Int64(settings.syncNowTimeoutMs))) else {
                            throw CommandError(.busy, "no outcome within \(settings.syncNowTimeoutMs / 1000) s; the attempt goes on")
                        }
                        if outcome == .notConfigured { throw CommandError(.notReady, "no sync config: send configureSync with at least a url") }
                        return .value(outcome)
                    }.mergingFleetReplies(SyncOutcome.acrossPartitions, withinMs: Int64(settings.syncNowTimeoutMs) + 60_000),
                ],
                worker: ServiceWorker { bus, counters in
                    let worker = UploadWorker(path: db.path, topics: topics, transport: transport, turns: turns, clock: clock, logger: logger,
                                              bus: bus, counters: counters)
                    made.worker = worker
                    return worker
                })
        }
    }

    /// `configureSync {url?, headers?, …}`: merged over the config in force,
    /// checked, stored; replies with the config, secrets masked.
    private static func configure(_ command: IncomingCommand, store: UploaderStore, worker: UploadWorker?) throws -> SyncConfig {
        guard case .object(let changes) = command.request.args ?? .object([:]) else {
            throw CommandError(.badInput, "args must be an object of SyncConfig keys")
        }
        var merged: [String: JSONValue] = [:]
        if let current = try store.config(), case .object(let fields) = try JSONValue(encoding: current) { merged = fields }
        for (key, value) in changes { merged[key] = value }
        let config: SyncConfig
        do {
            config = try JSONValue.object(merged).decode(SyncConfig.self).validated()
        } catch let error as SyncConfigError {
            throw CommandError(.invalidConfig, error.description)
        } catch let error as DecodingError {
            throw CommandError(.invalidConfig, DecodingErrorText.describe(error, root: "args"))
        }
        try store.save(config)
        worker?.wake()
        return config.masked
    }
}

/// The uploader's worker, once the host has made it (the routes are wired first).
final class WorkerSlot: @unchecked Sendable {
    // @unchecked: set once by the host's init, before its parts start or any message arrives; read-only after.
    var worker: UploadWorker?
}
