import Model

/// A device as the gateway keeps it: the last seq it gave out and its sessions.
public struct GatewayRow: Codable, Sendable, Equatable {
    public var lastSeq: Int64
    public var sessions: DeviceSessions

    public init(lastSeq: Int64 = 0, sessions: DeviceSessions = DeviceSessions()) {
        self.lastSeq = lastSeq; self.sessions = sessions
    }
}

/// What the gateway decided about one payload, for the host to carry out.
public enum GatewayEffect: Equatable, Sendable {
    /// A numbered fix: into the raw ring, out on `raw`.
    case raw(RawFix)
    /// A session opened or closed: stored, and announced as an event.
    case session(SessionEffect)
    /// A fix refused for what it says: an `error` event `badInput`.
    case badInput(InputProblem)
    /// Fixes dropped as already received (same device and `t`).
    case duplicates([Int64])
    /// A payload that is not a fix at all (an OwnTracks `_type` other than location).
    case ignored(reason: String)
}

/// The gateway's decisions: numbering, deduplication, sessions and the raw
/// fix. Pure: the store's answer (which times it holds already), ids and
/// times come in as arguments.
public struct GatewayCore: Sendable {
    public var rules: SessionRules

    public init(rules: SessionRules) { self.rules = rules }

    /// One parsed payload from `device`, received at `nowMs`.
    public func handle(_ payload: ParsedPayload, device: DeviceID, row: inout GatewayRow, at nowMs: Int64,
                       stored: (Int64) throws -> Bool, epoch: String?, newSessionID: () -> String) rethrows -> [GatewayEffect] {
        switch payload {
        case .refused(let problem): return [.badInput(problem)]
        case .ignored(let reason): return [.ignored(reason: reason)]
        case .fixes(let results):
            var effects: [GatewayEffect] = []
            var duplicates: [Int64] = []
            var seen: Set<Int64> = []
            for result in results {
                let fix: NormalizedFix
                switch result {
                case .failure(let problem): effects.append(.badInput(problem)); continue
                case .success(let valid): fix = valid
                }
                // The same fix twice (in this payload, or already in the ring) is dropped once, loudly.
                guard seen.insert(fix.timeMs).inserted, try !stored(fix.timeMs) else { duplicates.append(fix.timeMs); continue }
                for effect in rules.fixArrived(&row.sessions, device: device, fixMs: fix.timeMs, receivedMs: nowMs, newID: newSessionID) {
                    effects.append(.session(effect))
                }
                row.lastSeq += 1
                effects.append(.raw(RawFix(device: device, seq: row.lastSeq, sessionID: row.sessions.current?.id,
                                           timeMs: fix.timeMs, receivedMs: nowMs, source: fix.source,
                                           latitude: fix.latitude, longitude: fix.longitude, accuracyM: fix.accuracyM,
                                           speedMps: fix.speedMps, courseDeg: fix.courseDeg, altitudeM: fix.altitudeM,
                                           verticalAccuracyM: fix.verticalAccuracyM, mock: fix.mock, batteryPct: fix.batteryPct,
                                           epoch: epoch)))
            }
            if !duplicates.isEmpty { effects.append(.duplicates(duplicates)) }
            return effects
        }
    }
}
