import Bus
import FilterCore
import FoundationEssentials
import Model
import Runtime

struct FilterSettings {
    var profile: FilterProfile
    var decisionLog: Bool
    var rawPoints: Bool
    var retentionPerDevice: Int
    var retentionTotal: Int
    var rejectionEvents: RejectionEvents

    init(_ reader: SettingsReader) throws {
        let name = try reader.choice("profile", default: "balanced", among: FilterProfile.Name.allCases.map(\.rawValue))
        guard let named = FilterProfile.Name(rawValue: name) else { throw ConfigError("profile", "no profile named '\(name)'") }
        profile = .named(named)
        // The two decision delays: the profile's by default, a deployment may trade them for latency.
        profile.lookAheadMs = Int64(try reader.double("lookAheadSec", default: Double(profile.lookAheadMs) / 1000, in: 0...120) * 1000)
        profile.lookAheadFixes = try reader.int("lookAheadFixes", default: profile.lookAheadFixes, in: 1...3)
        profile.smoothingLagMs = Int64(try reader.double("smoothingLagSec", default: Double(profile.smoothingLagMs) / 1000, in: 0...60) * 1000)
        decisionLog = try reader.bool("decisionLog", default: true)
        rawPoints = try reader.bool("rawPoints", default: true)
        retentionPerDevice = try reader.int("retentionPerDevice", default: 100_000, in: 100...100_000_000)
        retentionTotal = try reader.int("retentionTotal", default: 5_000_000, in: 1_000...1_000_000_000)
        let events = try reader.choice("rejectionEvents", default: "all", among: ["all", "sampled", "off"])
        let every = try reader.int("rejectionSampleEvery", default: 10, in: 1...1_000_000)
        rejectionEvents = switch events {
        case "sampled": .sampled(every: every)
        case "off": .off
        default: .all
        }
    }
}

/// Judges every raw fix, fix by fix, and publishes the accepted ones on
/// `tracker/{device}/points`: the filter's table for the service host.
enum FilterService {
    static func definition(_ settings: FilterSettings) -> ServiceDefinition<FilterRow> {
        // The binary form (StoredRow.swift); rows of earlier releases are JSON and still read.
        let rows = RowCodec<FilterRow>(fresh: { FilterRow() }, encode: { $0.stored }, decode: { data in
            let (row, restarted) = try FilterRow.restored(from: data, using: JSONCoding.decoder)
            return (row, restarted ? "saved filter state is in a shape this version cannot read (see SavedState.swift); the filter restarts, odometer kept" : nil)
        }, binary: true)
        return ServiceDefinition(name: "filter", migrations: FilterStore.migrations, rows: rows) { db in
            let store = try FilterStore(db: db)
            let core = FilterCore(profile: settings.profile)
            let keep = settings.retentionPerDevice, total = settings.retentionTotal
            return Routes(
                inputs: [
                    .sequenced("raw", decode: { try RawFix(flat: $0) ?? JSONCoding.decoder.decode(RawFix.self, from: Data($0)) }) { raw, work in
                        try judge(raw, work, core: core, store: store, settings: settings)
                    },
                    .sequenced("motion", decode: { try MotionMessage(flat: $0) ?? JSONCoding.decoder.decode(MotionMessage.self, from: Data($0)) }) { update, work in
                        core.noteMotion(update.state, timeMs: update.timeMs, state: &work.row.state)
                    },
                ],
                commands: [
                    .query("getDecisions") { [decisionLog = settings.decisionLog] command, query in
                        let args = try command.arguments(PageArgs.self)
                        let page = try args.validated()
                        guard decisionLog else { throw CommandError(.notReady, "the decision log is off (decisionLog: false)") }
                        return try FilterStore.page(query, part: LoggedJudgement.decisionPart, sessionID: args.sessionID, limit: page.limit, offset: page.offset)
                    },
                    .query("getRawPoints") { [rawPoints = settings.rawPoints] command, query in
                        let args = try command.arguments(PageArgs.self)
                        let page = try args.validated()
                        guard rawPoints else { throw CommandError(.notReady, "judged points are off (rawPoints: false)") }
                        return try FilterStore.page(query, part: LoggedJudgement.pointPart, sessionID: args.sessionID, limit: page.limit, offset: page.offset)
                    },
                ],
                outbox: OutboxRoute(log: store.points) { $0.points($1) },
                retention: [LogRetention(store.judgements, keepPerDevice: keep, maxTotal: total),
                            LogRetention(store.points, keepPerDevice: keep, maxTotal: total)],
                // Fixes waiting for later ones (a held sparse fix, the smoothing
                // lag) are published once the device has been silent too long.
                sweep: core.profile.lookAhead || core.profile.smoothingLagMs > 0 ? SweepRoute(every: .seconds(1), candidates: { nowMs in
                    try store.waitingDue(nowMs)
                }, apply: { work in
                    if let due = core.dueMs(silentSince: work.row.arrivedMs ?? 0, state: work.row.state), work.nowMs < due {
                        // Still reporting: look again when it would be due.
                        try store.noteWaiting(work.device, due: due)
                        return
                    }
                    try record(core.release(row: &work.row, rejectionEvents: settings.rejectionEvents), work, store: store, settings: settings)
                    // Whatever waits now, or nothing: a row that restarted (a state it could not read) leaves no stale entry.
                    try writeWaiting(work, core: core, store: store)
                }) : nil,
                // A point takes its raw fix's seq: a device that starts over numbers nothing of its own.
                startOver: { _, _ in FilterRow() })
        }
    }

    private static func judge(_ raw: RawFix, _ work: Work<FilterRow>, core: FilterCore, store: FilterStore,
                              settings: FilterSettings) throws {
        let waitedBefore = core.waitMs(work.row.state)
        work.row.arrivedMs = work.nowMs
        try record(core.handle(raw, row: &work.row, rejectionEvents: settings.rejectionEvents), work, store: store, settings: settings)
        try noteWaiting(work, waitedBefore: waitedBefore, core: core, store: store)
        work.processed()
        work.lag(receivedMs: raw.receivedMs > 0 ? raw.receivedMs : nil, fixMs: raw.timeMs)
    }

    /// Logs, publishes and counts what was judged (with look-ahead, a fix
    /// judged late comes before the one that decided it).
    private static func record(_ judgements: [Judgement], _ work: Work<FilterRow>, store: FilterStore, settings: FilterSettings) throws {
        for judgement in judgements {
            let fix = judgement.judged.fix
            if settings.decisionLog || settings.rawPoints {
                let logged = LoggedJudgement(judgement, decision: settings.decisionLog, point: settings.rawPoints)
                try work.append(to: store.judgements, seq: fix.seq, sessionID: fix.sessionID, timeMs: fix.timeMs,
                                body: JSONCoding.bytes(logged))
                if !settings.decisionLog { try store.notePartMissing(work.device, part: LoggedJudgement.decisionPart) }
                if !settings.rawPoints { try store.notePartMissing(work.device, part: LoggedJudgement.pointPart) }
            }
            if let point = judgement.point {
                try work.send(PointMessage(device: work.device, point: point, epoch: work.epoch, measured: fix.reading,
                                           receivedMs: fix.receivedMs),
                              sessionID: fix.sessionID, timeMs: point.timeMs)
                work.emit(.location(point), timeMs: point.timeMs)
            } else if judgement.announceRejection {
                work.emit(.locationRejected(judgement.decision), timeMs: fix.timeMs)
            }
            // Health's accounting: accepted + rejected = fixes judged.
            work.count(judgement.point == nil ? "rejected" : "accepted")
        }
    }

    /// The waiting table notes a device when fixes start waiting, forgets
    /// it when none do, and notes it again when they come to wait less (a
    /// held fix gone on into the smoothing lag: left as it was, its entry
    /// came due late). Otherwise untouched, so it costs no write per fix (a
    /// sparse device's wait follows its interval): an entry that comes due
    /// early is moved on by the sweep. `waitedBefore`: `waitMs` before this unit.
    private static func noteWaiting(_ work: Work<FilterRow>, waitedBefore: Int64?, core: FilterCore, store: FilterStore) throws {
        switch (waitedBefore, core.waitMs(work.row.state)) {
        case (nil, nil): return
        case (let before?, let now?) where now >= before: return
        default: try writeWaiting(work, core: core, store: store)
        }
    }

    /// Notes when what the device has waiting is due, or forgets it when nothing waits.
    private static func writeWaiting(_ work: Work<FilterRow>, core: FilterCore, store: FilterStore) throws {
        try store.noteWaiting(work.device, due: core.dueMs(silentSince: work.row.arrivedMs ?? work.nowMs, state: work.row.state))
    }
}
