import Bus
import FilterCore
import Foundation
import Model
import Runtime

struct FilterSettings {
    enum RejectionEvents: String, CaseIterable { case all, sampled, off }

    var profile: FilterProfile
    var decisionLog: Bool
    var rawPoints: Bool
    var retentionPerDevice: Int
    var rejectionEvents: RejectionEvents
    var rejectionSampleEvery: Int

    init(_ reader: SettingsReader) throws {
        let name = try reader.choice("profile", default: "balanced", among: FilterProfile.Name.allCases.map(\.rawValue))
        profile = .named(FilterProfile.Name(rawValue: name)!)
        decisionLog = try reader.bool("decisionLog", default: true)
        rawPoints = try reader.bool("rawPoints", default: true)
        retentionPerDevice = try reader.int("retentionPerDevice", default: 100_000, in: 100...100_000_000)
        rejectionEvents = RejectionEvents(rawValue: try reader.choice(
            "rejectionEvents", default: "all", among: RejectionEvents.allCases.map(\.rawValue)))!
        rejectionSampleEvery = try reader.int("rejectionSampleEvery", default: 10, in: 1...1_000_000)
    }
}

/// Layer 3: a judged fix in point form, as `getRawPoints` returns it.
struct JudgedPoint: Codable {
    var seq: Int64
    var sessionID: String?
    var timeMs: Int64
    var latitude: Double
    var longitude: Double
    var accuracyM: Double
    var speedMps: Double?
    var courseDeg: Double?
    var accepted: Bool
    var reason: String
}

extension JudgedPoint: JSONWritable {
    func write(to w: inout JSONWriter) {
        w.beginObject()
        w.field("accepted", accepted)
        w.field("accuracyM", accuracyM)
        w.field("courseDeg", courseDeg)
        w.field("latitude", latitude)
        w.field("longitude", longitude)
        w.field("reason", reason)
        w.field("seq", seq)
        w.field("sessionID", sessionID)
        w.field("speedMps", speedMps)
        w.field("timeMs", timeMs)
        w.endObject()
    }
}

/// Judges every raw fix, fix by fix, and publishes the accepted ones.
///
/// @unchecked Sendable: all mutable state is behind `lock`; see GatewayService.
final class FilterService: TrackerService, @unchecked Sendable {
    private let context: ServiceContext
    private let settings: FilterSettings
    private let store: FilterStore
    private let core: FilterCore
    private let outbox: Outbox
    private let lock = NSLock()
    private let rows: DeviceRows<FilterStore.DeviceRow>
    private var rejectionCounts: [DeviceID: Int] = [:]

    private var topics: Topics { context.topics }

    init(context: ServiceContext, settings: FilterSettings) throws {
        self.context = context
        self.outbox = Outbox(client: context.client, logger: context.logger) { [topics = context.topics] in topics.points($0) }
        self.settings = settings
        self.store = try FilterStore(path: context.databasePath())
        self.core = FilterCore(profile: settings.profile)
        rows = DeviceRows(load: { [store, logger = context.logger] device in
            guard let row = try store.device(device) else { return FilterStore.DeviceRow(lastSeq: 0, state: DeviceFilterState()) }
            if row.restarted {
                logger.warning("saved filter state is from an older version; the filter restarts, odometer kept",
                               ["device": device.rawValue])
            }
            return row
        }, save: { [store] in try store.save($0, $1) })
        try outbox.restore(from: store)
    }

    var subscriptions: [String] {
        [topics.allRaw, topics.allMotion] + CommandCatalog.filter.map(topics.allCommands(named:))
    }

    func handle(_ message: MQTTMessage) {
        lock.lock()
        defer { lock.unlock() }
        // Everything until the next flush() shares one commit; each message's
        // own changes sit in a savepoint, so one failure spoils only itself.
        try? store.db.openBatch()
        switch topics.parse(message.topic) {
        case .raw(let device): judge(message, device: device)
        case .motion(let device): motion(message, device: device)
        case .command(let device, let name):
            guard let command = context.responder.parse(message, device: device, name: name) else { return }
            context.responder.answer(command) { try run(command) }
        default: break
        }
    }

    private func judge(_ message: MQTTMessage, device: DeviceID) {
        let nowMs = context.clock.nowMs()
        let raw: RawFix
        do {
            raw = try RawFix(flat: message.payload) ?? JSONCoding.decoder.decode(RawFix.self, from: Data(message.payload))
        } catch {
            context.counters.error()
            context.publish(Event(device: device, timeMs: nowMs, .error(code: ErrorCode.badInput.rawValue,
                                                                        message: "raw: unreadable internal message: \(Self.describe(error))")))
            return
        }
        var pointBody: Data?
        let verdict: Verdict
        do {
            var row = try rows.row(device)
            // At-least-once delivery: anything at or below the last applied seq was applied already.
            guard raw.seq > row.lastSeq else { context.counters.count("redelivered"); return }
            verdict = core.judge(FilterInput(raw), state: &row.state)
            row.lastSeq = raw.seq
            try store.db.transaction {
                if settings.decisionLog {
                    try store.insert(.decisions, device: device, seq: raw.seq, sessionID: raw.sessionID,
                                     body: JSONCoding.encode(verdict.decision))
                }
                if settings.rawPoints {
                    let judged = JudgedPoint(seq: raw.seq, sessionID: raw.sessionID, timeMs: raw.timeMs, latitude: raw.latitude,
                                             longitude: raw.longitude, accuracyM: raw.accuracyM, speedMps: raw.speedMps,
                                             courseDeg: raw.courseDeg, accepted: verdict.decision.accepted,
                                             reason: verdict.decision.reason)
                    try store.insert(.judged, device: device, seq: raw.seq, sessionID: raw.sessionID, body: JSONCoding.encode(judged))
                }
                if let point = verdict.point {
                    let body = JSONCoding.encode(PointMessage(device: device, point: point))
                    try store.insert(.points, device: device, seq: raw.seq, sessionID: nil, body: body)
                    pointBody = body
                }
                if raw.seq % 512 == 0 {
                    try store.trim(device, lastSeq: row.lastSeq, ackedThrough: outbox.ackedThrough(device), keep: settings.retentionPerDevice)
                }
            }
            rows.update(device, row)
        } catch {
            // Only this fix's savepoint rolled back; the cached state is the one before it.
            context.counters.error()
            context.logger.error("store failed; fix not judged", ["device": device.rawValue, "seq": "\(raw.seq)", "error": "\(error)"])
            return
        }
        context.counters.processed()
        context.counters.lag(nowMs - raw.receivedMs)
        if let point = verdict.point, let pointBody {
            outbox.publish(device, seq: point.seq, body: Array(pointBody))
            context.publish(Event(device: device, timeMs: point.timeMs, .location(point)))
        } else if shouldPublishRejection(device) {
            context.publish(Event(device: device, timeMs: raw.timeMs, .locationRejected(verdict.decision)))
        }
    }

    static func describe(_ error: any Error) -> String {
        (error as? DecodingError).map(DecodingErrorText.describe) ?? "\(error)"
    }

    private func shouldPublishRejection(_ device: DeviceID) -> Bool {
        switch settings.rejectionEvents {
        case .all: return true
        case .off: return false
        case .sampled:
            let n = rejectionCounts[device, default: 0]
            rejectionCounts[device] = n + 1
            return n % settings.rejectionSampleEvery == 0
        }
    }

    private func motion(_ message: MQTTMessage, device: DeviceID) {
        let update: MotionMessage
        do {
            update = try JSONCoding.decoder.decode(MotionMessage.self, from: Data(message.payload))
        } catch {
            context.counters.error()
            context.publish(Event(device: device, timeMs: context.clock.nowMs(), .error(
                code: ErrorCode.badInput.rawValue, message: "motion: unreadable internal message: \(Self.describe(error))")))
            return
        }
        do {
            var row = try rows.row(device)
            row.state.externalMotion = update.state
            rows.update(device, row)
        } catch {
            context.logger.error("store failed; motion state not saved", ["device": device.rawValue, "error": "\(error)"])
        }
    }

    /// On the first connect, republish whatever the last run may not have delivered.
    func connected(reconnect: Bool) {
        lock.lock()
        defer { lock.unlock() }
        outbox.republishOnce(from: store)
    }

    func flush() {
        lock.lock()
        defer { lock.unlock() }
        rows.commit(store.db, logger: context.logger, counters: context.counters)
    }

    func tick() {
        lock.lock()
        defer { lock.unlock() }
        rows.commit(store.db, logger: context.logger, counters: context.counters)
        do {
            try store.db.transaction { try outbox.saveWatermarks(to: store) }
        } catch {
            context.logger.error("periodic save failed", ["error": "\(error)"])
        }
        // Acknowledgements keep arriving after the last fix: health reports what is still pending now.
        context.counters.queueDepth(Int64(outbox.pendingCount))
    }

    func close() { tick() }

    private func run(_ command: IncomingCommand) throws -> any Encodable {
        guard !command.device.isReserved else {
            throw CommandError(.badInput, "'\(command.name)' is a per-device command, not for \(command.device)")
        }
        let args = try command.arguments(PageArgs.self)
        let page = try args.validated()
        switch command.name {
        case "getDecisions":
            guard settings.decisionLog else { throw CommandError(.notReady, "the decision log is off (decisionLog: false)") }
            return try store.page(.decisions, device: command.device, sessionID: args.sessionID, limit: page.limit, offset: page.offset)
        case "getRawPoints":
            guard settings.rawPoints else { throw CommandError(.notReady, "judged points are off (rawPoints: false)") }
            return try store.page(.judged, device: command.device, sessionID: args.sessionID, limit: page.limit, offset: page.offset)
        default:
            throw CommandError(.notFound, "no command named '\(command.name)'")
        }
    }
}
