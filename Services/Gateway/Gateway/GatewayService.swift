import Bus
import Foundation
import GatewayCore
import Model
import Runtime

/// The gateway's settings, read from `config/gateway.json` and the environment.
struct GatewaySettings {
    var ringCapacity: Int
    var sessionPolicy: SessionPolicy
    var validator: FixValidator
    var ownTracks: Bool

    init(_ reader: SettingsReader) throws {
        ringCapacity = try reader.int("ringCapacity", default: 50_000, in: 10...10_000_000)
        sessionPolicy = SessionPolicy(
            autoSession: try reader.bool("autoSession", default: true),
            idleTimeoutMs: Int64(try reader.double("sessionIdleTimeoutSec", default: 1_800, in: 1...31_536_000) * 1000))
        let staleness = try reader.optionalDouble("stalenessCeilingSec", in: 1...315_360_000)
        validator = FixValidator(
            maxFutureMs: Int64(try reader.double("maxFutureSec", default: 600, in: 0...31_536_000) * 1000),
            stalenessCeilingMs: staleness.map { Int64($0 * 1000) },
            mockPolicy: FixValidator.MockPolicy(rawValue: try reader.choice(
                "mockPolicy", default: "accept", among: FixValidator.MockPolicy.allCases.map(\.rawValue)))!,
            maxPayloadBytes: try reader.int("maxPayloadBytes", default: 256 * 1024, in: 1_024...16 * 1024 * 1024))
        ownTracks = try reader.bool("ownTracks", default: true)
    }
}

/// Takes fixes from devices, validates them, numbers them, keeps the raw
/// ring and publishes each accepted fix on `tracker/{device}/raw`.
///
/// @unchecked Sendable: every entry point takes `lock`, which guards all
/// mutable state (the store, the cache); the bus calls `handle` from one thread.
final class GatewayService: TrackerService, @unchecked Sendable {
    private let context: ServiceContext
    private let settings: GatewaySettings
    private let store: GatewayStore
    private let parser: FixParser
    private let rules: SessionRules
    private let outbox: Outbox
    private let lock = NSLock()
    private let rows: DeviceRows<GatewayStore.DeviceRow>

    private var topics: Topics { context.topics }

    init(context: ServiceContext, settings: GatewaySettings) throws {
        self.context = context
        self.outbox = Outbox(client: context.client, logger: context.logger) { [topics = context.topics] in topics.raw($0) }
        self.settings = settings
        self.store = try GatewayStore(path: context.databasePath())
        self.parser = FixParser(validator: settings.validator)
        self.rules = SessionRules(policy: settings.sessionPolicy)
        rows = DeviceRows(load: { [store] in
            try store.device($0) ?? GatewayStore.DeviceRow(lastSeq: 0, sessions: DeviceSessions())
        }, save: { [store] in try store.saveDevice($0, $1) })
        try outbox.restore(from: store)
    }

    var subscriptions: [String] {
        [topics.allFixes, topics.anyCommand] + (settings.ownTracks ? [Topics.ownTracks] : [])
    }

    // MARK: Messages

    func handle(_ message: MQTTMessage) {
        lock.lock()
        defer { lock.unlock() }
        // Everything until the next flush() shares one commit; each message's
        // own changes sit in a savepoint, so one failure spoils only itself.
        try? store.db.openBatch()
        let nowMs = context.clock.nowMs()
        switch topics.parse(message.topic) {
        case .fixes(let device):
            ingest(parser.parseDevicePayload(message.payload, nowMs: nowMs), device: device, nowMs: nowMs)
        case .ownTracks(let device):
            ingest(parser.parseOwnTracksPayload(message.payload, nowMs: nowMs), device: device, nowMs: nowMs)
        case .command(let device, let name):
            command(message, device: device, name: name)
        case .invalidDevice(let segment):
            context.counters.count("invalidTopic")
            context.logger.warning("payload on a topic with an invalid device id", ["mqtt.topic": message.topic, "device": segment])
        default:
            break
        }
    }

    private func ingest(_ parsed: ParsedPayload, device: DeviceID, nowMs: Int64) {
        switch parsed {
        case .refused(let problem):
            reportBadInput(device, problem, nowMs: nowMs)
        case .ignored(let reason):
            context.counters.count("ignored")
            context.publish(Event(device: device, timeMs: nowMs, .diagnostic(code: "ignored", message: reason)))
        case .fixes(let results):
            var valid: [NormalizedFix] = []
            for result in results {
                switch result {
                case .success(let fix): valid.append(fix)
                case .failure(let problem): reportBadInput(device, problem, nowMs: nowMs)
                }
            }
            if !valid.isEmpty { accept(valid, device: device, nowMs: nowMs) }
        }
    }

    private func reportBadInput(_ device: DeviceID, _ problem: InputProblem, nowMs: Int64) {
        context.counters.error()
        context.publish(Event(device: device, timeMs: nowMs, .error(code: ErrorCode.badInput.rawValue, message: problem.message)))
    }

    /// Numbers and stores the fixes in one transaction, then publishes them.
    private func accept(_ fixes: [NormalizedFix], device: DeviceID, nowMs: Int64) {
        var published: [(RawFix, Data)] = []
        var sessionEffects: [SessionEffect] = []
        var duplicates: [Int64] = []
        do {
            try store.db.transaction {
                var row = try rows.row(device)
                for fix in fixes {
                    if try store.hasFix(device, timeMs: fix.timeMs) { duplicates.append(fix.timeMs); continue }
                    sessionEffects += rules.fixArrived(&row.sessions, device: device, fixMs: fix.timeMs,
                                                       receivedMs: nowMs, newID: Self.newSessionID)
                    row.lastSeq += 1
                    let raw = RawFix(device: device, seq: row.lastSeq, sessionID: row.sessions.current?.id,
                                     timeMs: fix.timeMs, receivedMs: nowMs, source: fix.source,
                                     latitude: fix.latitude, longitude: fix.longitude, accuracyM: fix.accuracyM,
                                     speedMps: fix.speedMps, courseDeg: fix.courseDeg, altitudeM: fix.altitudeM,
                                     verticalAccuracyM: fix.verticalAccuracyM, mock: fix.mock, batteryPct: fix.batteryPct)
                    let body = JSONCoding.encode(raw)
                    try store.insertFix(raw, body: body)
                    published.append((raw, body))
                }
                for effect in sessionEffects {
                    switch effect { case .opened(let s), .closed(let s): try store.saveSession(s) }
                }
                if row.lastSeq % 256 == 0 || published.count > 1 {
                    try store.trim(device, lastSeq: row.lastSeq, ackedThrough: outbox.ackedThrough(device), capacity: settings.ringCapacity)
                }
                rows.update(device, row)
            }
        } catch {
            // Only this message's savepoint rolled back; the cached row is still
            // the one before it.
            context.counters.error()
            context.logger.error("store failed; fixes not accepted", ["device": device.rawValue, "error": "\(error)"])
            context.publish(Event(device: device, timeMs: nowMs, .error(code: ErrorCode.internal.rawValue,
                                                                        message: "store failed: \(error)")))
            return
        }
        for effect in sessionEffects { publishSessionEffect(effect, nowMs: nowMs) }
        for (raw, body) in published { outbox.publish(device, seq: raw.seq, body: Array(body)) }
        if let last = published.last { context.counters.lag(nowMs - last.0.timeMs) }
        context.counters.processed(Int64(published.count))
        if !duplicates.isEmpty {
            context.counters.count("duplicates", Int64(duplicates.count))
            let list = duplicates.map { String(format: "%.3f", Double($0) / 1000) }.joined(separator: ", ")
            context.publish(Event(device: device, timeMs: nowMs, .diagnostic(
                code: "duplicateFix", message: "dropped \(duplicates.count) fix(es) already received with the same t: \(list)")))
        }
    }

    private func publishSessionEffect(_ effect: SessionEffect, nowMs: Int64) {
        switch effect {
        case .opened(let s): context.publish(Event(device: s.device, timeMs: nowMs, .sessionStarted(s)))
        case .closed(let s): context.publish(Event(device: s.device, timeMs: nowMs, .sessionStopped(s)))
        }
    }

    static func newSessionID() -> String { UUID().uuidString.lowercased() }

    // MARK: Restart safety

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
        let nowMs = context.clock.nowMs()
        var closed: [SessionEffect] = []
        do {
            try store.db.openBatch()
            try outbox.saveWatermarks(to: store)
            for (device, var row) in rows.all {
                guard let effect = rules.sweep(&row.sessions, nowMs: nowMs), case .closed(let session) = effect else { continue }
                try store.db.transaction { try store.saveSession(session) }
                rows.update(device, row)
                closed.append(effect)
            }
        } catch {
            context.logger.error("periodic save failed", ["error": "\(error)"])
        }
        rows.commit(store.db, logger: context.logger, counters: context.counters)
        closed.forEach { publishSessionEffect($0, nowMs: nowMs) }
        context.counters.queueDepth(Int64(outbox.pendingCount))
    }

    func close() {
        tick()
    }

    // MARK: Commands

    private func command(_ message: MQTTMessage, device: DeviceID, name: String) {
        let owned = CommandCatalog.gateway.contains(name)
        guard owned || !CommandCatalog.all.contains(name) else { return }  // another service answers it
        guard let command = context.responder.parse(message, device: device, name: name) else { return }
        context.responder.answer(command) {
            guard owned else { throw CommandError(.notFound, "no command named '\(name)'") }
            guard !device.isReserved else { throw CommandError(.badInput, "'\(name)' is a per-device command, not for \(device)") }
            return try run(command)
        }
    }

    private struct StartArgs: Decodable { var tag: String? }
    private struct RangeArgs: Decodable { var fromMs: Int64?; var toMs: Int64? }
    private struct ExportArgs: Decodable { var sessionID: String; var name: String }

    struct Fixture: Encodable {
        var name: String
        var sessionID: String
        var count: Int
        var jsonl: String
    }

    private func run(_ command: IncomingCommand) throws -> any Encodable {
        let device = command.device
        let nowMs = context.clock.nowMs()
        switch command.name {
        case "start":
            let args = try command.arguments(StartArgs.self)
            if let tag = args.tag, tag.count > 200 { throw CommandError(.badInput, "tag: longer than 200 characters") }
            var row = try rows.row(device)
            let effects = rules.start(&row.sessions, device: device, tag: args.tag, nowMs: nowMs, newID: Self.newSessionID)
            try store.db.transaction {
                for effect in effects { switch effect { case .opened(let s), .closed(let s): try store.saveSession(s) } }
            }
            rows.update(device, row)
            effects.forEach { publishSessionEffect($0, nowMs: nowMs) }
            return row.sessions.current
        case "stop":
            var row = try rows.row(device)
            let closed = try rules.stop(&row.sessions, nowMs: nowMs)
            try store.db.transaction { try store.saveSession(closed) }
            rows.update(device, row)
            publishSessionEffect(.closed(closed), nowMs: nowMs)
            return closed
        case "currentSession":
            return try rows.row(device).sessions.current
        case "getSessions":
            let args = try command.arguments(RangeArgs.self)
            return try store.sessions(device, fromMs: args.fromMs, toMs: args.toMs)
        case "getRawFixes":
            let args = try command.arguments(PageArgs.self)
            let page = try args.validated()
            if let id = args.sessionID { try requireSession(id, of: device) }
            return try store.rawFixes(device, sessionID: args.sessionID, limit: page.limit, offset: page.offset)
        case "exportFixture":
            let args = try command.arguments(ExportArgs.self)
            guard DeviceID(args.name) != nil else {
                throw CommandError(.badInput, "name: use 1–64 of A-Z a-z 0-9 . _ - for a fixture name")
            }
            try requireSession(args.sessionID, of: device)
            var lines: [String] = []
            var offset = 0
            while true {
                let page = try store.rawFixes(device, sessionID: args.sessionID, limit: 5_000, offset: offset)
                lines += page.map { JSONCoding.string($0.deviceFix) }
                if page.count < 5_000 { break }
                offset += page.count
            }
            return Fixture(name: args.name, sessionID: args.sessionID, count: lines.count,
                           jsonl: lines.joined(separator: "\n") + (lines.isEmpty ? "" : "\n"))
        default:
            throw CommandError(.notFound, "no command named '\(command.name)'")
        }
    }

    private func requireSession(_ id: String, of device: DeviceID) throws {
        guard let session = try store.session(id: id), session.device == device else {
            throw CommandError(.notFound, "sessionID: no session '\(id)' for device \(device)")
        }
    }
}
