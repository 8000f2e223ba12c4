import Bus
import FoundationEssentials
import GatewayCore
import Model
import Runtime

/// The gateway's settings, read from `config/gateway.json` and the environment.
struct GatewaySettings {
    var ringCapacity: Int
    var ringTotalCapacity: Int
    var sessionsPerDevice: Int
    var sessionsTotal: Int
    var sessionPolicy: SessionPolicy
    var validator: FixValidator
    var ownTracks: Bool
    /// Devices one OwnTracks user may create (`maxDevicesPerAccount`).
    var maxDevicesPerAccount: Int
    /// The apps' regions (waypoints) armed as the device's Tracker geofences (`ot-{key}`).
    var ownTracksGeofences: Bool
    var maxRegionsPerDevice: Int

    init(_ reader: SettingsReader) throws {
        // The ring is also the duplicate check for redelivered fixes: it must hold
        // at least what the broker may redeliver after a dropped connection
        // (the 1,000 messages in flight to us), or a redelivered fix would be numbered twice.
        ringCapacity = try reader.int("ringCapacity", default: 50_000, in: 1_000...10_000_000)
        ringTotalCapacity = try reader.int("ringTotalCapacity", default: 5_000_000, in: 1_000...1_000_000_000)
        sessionsPerDevice = try reader.int("sessionsPerDevice", default: 10_000, in: 10...10_000_000)
        sessionsTotal = try reader.int("sessionsTotal", default: 1_000_000, in: 1_000...1_000_000_000)
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
        maxDevicesPerAccount = try reader.int("maxDevicesPerAccount", default: 20, in: 1...1_000_000)
        ownTracksGeofences = try reader.bool("ownTracksGeofences", default: false)
        maxRegionsPerDevice = try reader.int("maxRegionsPerDevice", default: 100, in: 1...10_000)
    }
}

/// Takes fixes from devices, validates them, numbers them, keeps the raw
/// ring and publishes each accepted fix on `tracker/{device}/raw`: the
/// gateway's table for the service host.
enum GatewayService {
    static func definition(_ settings: GatewaySettings, newSessionID: @escaping () -> String = Self.newSessionID)
        -> ServiceDefinition<GatewayRow> {
        var definition = ServiceDefinition(name: "gateway", migrations: GatewayStore.migrations, rows: .binary(fresh: { GatewayRow() })) { db in
            let store = try GatewayStore(db: db, sessionsPerDevice: settings.sessionsPerDevice, sessionsTotal: settings.sessionsTotal)
            let handler = Handler(store: store, parser: FixParser(validator: settings.validator),
                                  core: GatewayCore(rules: SessionRules(policy: settings.sessionPolicy)), newSessionID: newSessionID,
                                  regions: RegionKeeper(store: store, arm: settings.ownTracksGeofences, max: settings.maxRegionsPerDevice))
            var inputs: [InputRoute<GatewayRow>] = [
                .external("fixes", filter: \.allFixes) { message, work in
                    try handler.ingest(handler.parser.parseDevicePayload(message.payload, nowMs: work.nowMs), work)
                },
            ]
            if settings.ownTracks {
                let accounts = OwnTracksAccounts(store: store, max: settings.maxDevicesPerAccount)
                // What each of the apps' types does is in docs/gateway.md ("OwnTracks"). Told by `_type`,
                // as OwnTracks Recorder tells them, on the device's topic and its sub-topics alike.
                inputs.append(.external("owntracks", filter: \.allOwnTracks) { message, work in
                    // An empty retained payload is how the apps clear a retained message.
                    if message.payload.allSatisfy(FixParser.isWhitespace) { work.count("emptyIgnored"); return }
                    // A device the account has not had yet counts against its limit.
                    try accounts.admit(work.device, topic: message.topic, work)
                    let parsed = handler.parser.parseOwnTracksPayload(message.payload, nowMs: work.nowMs)
                    if case .ignored = parsed {
                        try handler.other(handler.parser.parseOwnTracksOther(message.payload, nowMs: work.nowMs), on: nil, work)
                    } else {
                        try handler.ingest(parsed, work)
                    }
                })
                // The ACL lets the apps write their sub-topics, so the broker keeps their connection: never refused.
                inputs.append(.external("owntracksSubtopic", filter: \.allOwnTracksSubtopics) { message, work in
                    if message.payload.allSatisfy(FixParser.isWhitespace) { work.count("emptyIgnored"); return }
                    let sub = message.topic.split(separator: "/").last.map(String.init) ?? ""
                    // Commands *to* the app (ours, `reportLocation`, or another tool's): not the app's data.
                    if sub == "cmd" { work.count("appCommands"); return }
                    try accounts.admit(work.device, topic: message.topic, work)
                    try handler.other(handler.parser.parseOwnTracksOther(message.payload, nowMs: work.nowMs), on: sub, work)
                })
            }
            let idleTimeoutMs = settings.sessionPolicy.idleTimeoutMs
            let sweepSlices = Int(max(1, min(60, idleTimeoutMs / 60 / 1_000)))
            return Routes(
                inputs: inputs,
                commands: handler.commands,
                outbox: OutboxRoute(log: store.ring) { $0.raw($1) },
                retention: [LogRetention(store.ring, keepPerDevice: settings.ringCapacity, maxTotal: settings.ringTotalCapacity)],
                // Every row is looked at within a sixtieth of the idle timeout (30 s of 30 min, at
                // most a minute): a slice of the rows every second, not all of them at once.
                sweep: SweepRoute(every: .seconds(1), candidates: { nowMs in
                    try store.devices(inNextSliceOf: sweepSlices) { handler.core.rules.isIdle($0.sessions, nowMs: nowMs) }
                }, apply: handler.sweep),
                answersUnknownCommands: true,
                // Numbering goes on past every raw fix sent (its consumers skip a seq they applied);
                // the open session, kept in its own table, goes on too, with its newest fix from the ring.
                startOver: { device, lastSent in
                    GatewayRow(lastSeq: lastSent, sessions: try store.sessionsFromTables(of: device))
                })
        }
        // Partitioned, a user's devices are in different partitions: the ingress counts them all.
        if settings.ownTracks { definition.ingressGate = { try AccountGate($0, max: settings.maxDevicesPerAccount) } }
        return definition
    }

    static func newSessionID() -> String { UUID().uuidString.lowercased() }

    /// The OwnTracks devices: each id (`DeviceID.ownTracks`) is kept with the
    /// user and device name it was made from, said once in a `diagnostic`
    /// `ownTracksDevice` when the device is new. At most `max` devices per
    /// user: a new one past that is refused (`limitReached`, said once per
    /// device while this process runs) and nothing of it is stored. Names that
    /// give an id another pair of names has already (`a.b`/`c` and `a`/`b.c`,
    /// kept as earlier versions made them) are refused (`conflict`), as is an
    /// empty name (`badInput`).
    final class OwnTracksAccounts {
        let store: GatewayStore
        let max: Int
        /// Devices refused already (bounded): counted again, not announced again.
        private var refused: Set<DeviceID> = []
        /// The names each device was checked against in this process (bounded): one store query per device.
        private var known: [DeviceID: Names] = [:]

        struct Names: Equatable { var user: String; var device: String }

        init(store: GatewayStore, max: Int) { self.store = store; self.max = max }

        func admit(_ device: DeviceID, topic: String, _ work: Work<GatewayRow>) throws {
            guard let (user, name) = work.topics.ownTracksNames(topic) else { return }
            let names = Names(user: user, device: name)
            if known[device] == names { return }
            guard !user.isEmpty, !name.isEmpty else {
                throw InputRefusal(.badInput, "topic: '\(topic.prefix(120))' has an empty \(user.isEmpty ? "user" : "device") name; not tracked",
                                   announce: first(device))
            }
            if let owner = try store.owner(of: device) {
                if owner.account == user, owner.name == name { return remember(device, names) }
                // A row of an earlier version knew only the id (its account guessed before the first dot).
                if owner.name == nil { try store.claim(device, account: user, name: name); return remember(device, names) }
                throw InputRefusal(.conflict, "topic: owntracks/\(user.prefix(64))/\(name.prefix(64)) maps to device \(device), which is "
                                   + "owntracks/\(owner.account.prefix(64))/\((owner.name ?? "").prefix(64))'s already; not tracked", announce: first(device))
            }
            let count = try store.deviceCount(of: user)
            guard count < max else {
                throw InputRefusal(.limitReached, "maxDevicesPerAccount: account '\(user.prefix(64))' has \(count) devices already "
                                   + "(the limit is \(max)); \(device) is not tracked", announce: first(device))
            }
            try store.claim(device, account: user, name: name)
            work.emit(.diagnostic(code: "ownTracksDevice", message: "OwnTracks user '\(user.prefix(100))', device '\(name.prefix(100))' is device \(device)"))
            // Remembered only once the transaction holds: a refusal later in this message undoes the claim.
            // (The next message of the device finds the row and remembers it then.)
        }

        private func remember(_ device: DeviceID, _ names: Names) {
            if known.count > 10_000 { known.removeAll() }
            known[device] = names
        }

        /// Whether a refusal of `device` is the first in this process.
        private func first(_ device: DeviceID) -> Bool {
            let first = refused.insert(device).inserted
            if refused.count > 10_000 { refused.removeAll() }
            return first
        }
    }

    /// Carries out the core's decisions on the store and the work's effects.
    struct Handler {
        let store: GatewayStore
        let parser: FixParser
        let core: GatewayCore
        let newSessionID: () -> String
        let regions: RegionKeeper

        func ingest(_ payload: ParsedPayload, _ work: Work<GatewayRow>) throws {
            let device = work.device
            let effects = try core.handle(payload, device: device, row: &work.row, at: work.nowMs,
                                          stored: { try store.ring.contains(device, timeMs: $0) },
                                          epoch: work.epoch, newSessionID: newSessionID)
            var accepted = 0
            for effect in effects {
                switch effect {
                case .raw(let raw):
                    try work.send(raw, sessionID: raw.sessionID, timeMs: raw.timeMs)
                    work.lag(receivedMs: raw.receivedMs, fixMs: raw.timeMs)
                    accepted += 1
                case .session(let change):
                    try record(change, work)
                case .badInput(let problem):
                    work.count("badInput")
                    work.error()
                    work.emit(.error(code: ErrorCode.badInput.rawValue, message: problem.message))
                case .duplicates(let times):
                    work.count("duplicates", Int64(times.count))
                    let list = times.map { (Double($0) / 1000).fixed(3) }.joined(separator: ", ")
                    work.emit(.diagnostic(code: "duplicateFix", message: "dropped \(times.count) fix(es) already received with the same t: \(list)"))
                case .ignored(let reason):
                    work.count("ignored")
                    work.emit(.diagnostic(code: "ignored", message: reason))
                }
            }
            work.processed(Int64(accepted))
        }

        /// One of the apps' messages other than a location (`sub`: the sub-topic it came on, if any).
        func other(_ message: OwnTracksOther, on sub: String?, _ work: Work<GatewayRow>) throws {
            let place = sub.map { " on '\($0.prefix(40))'" } ?? ""
            switch message {
            case .transition(let transition):
                work.count("regionTransitions")
                work.emit(.regionTransition(transition), timeMs: transition.timeMs)
            case .region(let region):
                try regions.keep([region], replacing: false, work)
            case .regions(let list):
                try regions.keep(list, replacing: true, work)
            case .lastWill:
                work.count("ignored")
                work.emit(.diagnostic(code: "ignored", message: "OwnTracks lwt\(place): the broker says the app's connection was lost; not a fix"))
            case .ignored(let type):
                work.count("ignored")
                work.emit(.diagnostic(code: "ignored", message: "OwnTracks _type '\(type)'\(place) is not used; ignored"))
            case .refused(let problem):
                work.count("badInput")
                work.error()
                work.emit(.error(code: ErrorCode.badInput.rawValue, message: problem.message))
            }
        }

        private func record(_ change: SessionEffect, _ work: Work<GatewayRow>) throws {
            switch change {
            case .opened(let s):
                if try store.openSession(s) { work.count("logsCapped") }
                work.emit(.sessionStarted(s))
            case .closed(let s):
                try store.saveSession(s)
                work.emit(.sessionStopped(s))
            }
        }

        /// The wall-clock sweep: an auto session whose device fell silent closes.
        func sweep(_ work: Work<GatewayRow>) throws {
            if let change = core.rules.sweep(&work.row.sessions, nowMs: work.nowMs) { try record(change, work) }
        }

        // MARK: Commands

        private struct StartArgs: Decodable { var tag: String? }
        private struct RangeArgs: Decodable {
            var fromMs: Int64?
            var toMs: Int64?
            enum CodingKeys: CodingKey { case fromMs, toMs }
            init(from decoder: any Decoder) throws {
                let c = try decoder.container(keyedBy: CodingKeys.self)
                fromMs = try c.decodeWholeNumberIfPresent(forKey: .fromMs).map(Int64.init)
                toMs = try c.decodeWholeNumberIfPresent(forKey: .toMs).map(Int64.init)
            }
        }

        private struct ExportArgs: Decodable {
            var sessionID: String
            var name: String
            var offset: Int?
            enum CodingKeys: CodingKey { case sessionID, name, offset }
            init(from decoder: any Decoder) throws {
                let c = try decoder.container(keyedBy: CodingKeys.self)
                sessionID = try c.decode(String.self, forKey: .sessionID)
                name = try c.decode(String.self, forKey: .name)
                offset = try c.decodeWholeNumberIfPresent(forKey: .offset)
            }
        }

        struct Fixture: Encodable {
            var name: String
            var sessionID: String
            var count: Int
            var jsonl: String
            /// The export did not fit one reply: ask again with this `offset`.
            var nextOffset: Int?
        }

        var commands: [CommandRoute<GatewayRow>] {
            [
                CommandRoute("start") { command, work in
                    let args = try command.arguments(StartArgs.self)
                    if let tag = args.tag, tag.count > 200 { throw CommandError(.badInput, "tag: longer than 200 characters") }
                    let changes = core.rules.start(&work.row.sessions, device: work.device, tag: args.tag, nowMs: work.nowMs,
                                                   newID: newSessionID)
                    for change in changes { try record(change, work) }
                    return work.row.sessions.current
                },
                CommandRoute("stop") { _, work in
                    let closed = try core.rules.stop(&work.row.sessions, nowMs: work.nowMs)
                    try record(.closed(closed), work)
                    return closed
                },
                CommandRoute("currentSession") { _, work in work.row.sessions.current },
                CommandRoute("reportLocation") { _, work in try reportLocation(work) },
                .query("getRegions") { _, query in .value(try GatewayStore.regions(query.db, of: query.device)) },
                .query("getSessions") { command, query in
                    let args = try command.arguments(RangeArgs.self)
                    return .value(try GatewayStore.sessions(query.db, query.device, fromMs: args.fromMs, toMs: args.toMs))
                },
                .query("getRawFixes") { command, query in
                    let args = try command.arguments(PageArgs.self)
                    let page = try args.validated()
                    if let id = args.sessionID { try Self.requireSession(id, query) }
                    return try query.page("raw_fixes", sessionID: args.sessionID, limit: page.limit, offset: page.offset)
                },
                .query("exportFixture") { command, query in
                    let args = try command.arguments(ExportArgs.self)
                    guard DeviceID(args.name) != nil else {
                        throw CommandError(.badInput, "name: use 1–64 of A-Z a-z 0-9 . _ - for a fixture name")
                    }
                    guard (args.offset ?? 0) >= 0 else { throw CommandError(.badInput, "offset must be ≥ 0, got \(args.offset ?? 0)") }
                    try Self.requireSession(args.sessionID, query)
                    // The recording, as many lines as fit in one reply; `nextOffset` continues it.
                    let page = try query.log("raw_fixes").page(query.device, sessionID: args.sessionID, limit: 50_000,
                                                               offset: args.offset ?? 0, maxBytes: query.maxReplyBytes * 2 / 3)
                    let lines = try page.bodies.map { JSONCoding.string(try JSONCoding.decoder.decode(RawFix.self, from: Data($0.utf8)).deviceFix) }
                    return .value(Fixture(name: args.name, sessionID: args.sessionID, count: lines.count,
                                          jsonl: lines.joined(separator: "\n") + (lines.isEmpty ? "" : "\n"), nextOffset: page.nextOffset))
                },
            ]
        }

        private static func requireSession(_ id: String, _ query: QueryContext) throws {
            guard let session = try GatewayStore.session(query.db, id: id), session.device == query.device else {
                throw CommandError(.notFound, "sessionID: no session '\(id)' for device \(query.device)")
            }
        }
    }
}
