import Bus
import FoundationEssentials
import Model
import MotionCore
import Runtime

/// A device as the motion service keeps it: the motion machine's row, its
/// fence visits and route progress, its session, and the clock's marks.
struct MotionDeviceRow: Codable, Equatable {
    var motion = MotionRow()
    var visits = FenceVisits()
    /// Present while the device has an active route.
    var route: RouteProgress?
    var openSession: String?
    /// The session closed last: a late point of it does not reopen it.
    var closedSession: String?
    /// The newest point's time, and when (wall clock) it came: the device's
    /// time runs on from it while it is silent.
    var clockMs: Int64?
    var clockWallMs: Int64?
    var lastHeartbeatMs: Int64?
    /// The activity last announced, and when (wall clock): `activityChange` is throttled.
    var announcedActivity: String?
    var announcedActivityWallMs: Int64?
    /// The seq of the last motion state sent on `tracker/{device}/motion`.
    var motionSeq: Int64 = 0
    /// The wall-clock time stored in `timers` for this device, if any.
    var timerWallMs: Int64?

    /// The device's own time, carried on by the wall clock since its newest fix.
    func deviceTime(wallMs: Int64) -> Int64 {
        guard let clock = clockMs, let wall = clockWallMs else { return wallMs }
        return clock + max(0, wallMs - wall)
    }

    /// A fix time seen at `wallMs`: the device's clock moves on (never back).
    mutating func advanceClock(toMs timeMs: Int64, wallMs: Int64) {
        guard timeMs > clockMs ?? .min else { return }
        clockMs = timeMs
        clockWallMs = wallMs
    }
}

/// Knows whether each device is moving or stopped and where it is against
/// its fences and route: the motion service's table for the service host.
enum MotionService {
    static func definition(_ settings: MotionSettings) -> ServiceDefinition<MotionDeviceRow> {
        ServiceDefinition(name: "motion", migrations: MotionStore.migrations, rows: .binary(fresh: { MotionDeviceRow() })) { db in
            let store = try MotionStore(db: db, historyPerDevice: settings.historyPerDevice, historyTotal: settings.historyTotal)
            let handler = MotionHandler(store: store, settings: settings)
            var inputs: [InputRoute<MotionDeviceRow>] = [
                .sequenced("points", decode: { try PointMessage(flat: $0) ?? JSONCoding.decoder.decode(PointMessage.self, from: Data($0)) }) { message, work in
                    try handler.point(message.point, receivedMs: message.receivedMs, work)
                },
                // Only the gateway's session events matter here; the rest are acknowledged unread.
                .external("events", filter: \.allEvents, when: SessionEvents.mentioned) { message, work in
                    try handler.sessionEvent(message.payload, work)
                },
            ]
            if settings.rules.activityRecognition {
                inputs.append(.external("activity", filter: \.allActivity) { message, work in
                    try handler.activity(message.payload, work)
                })
            }
            return Routes(
                inputs: inputs,
                commands: handler.commands,
                outbox: OutboxRoute(log: store.motion) { $0.motion($1) },
                retention: [LogRetention(store.motion, keepPerDevice: settings.retentionPerDevice, maxTotal: settings.retentionTotal)],
                sweep: SweepRoute(every: .seconds(1), candidates: { try store.devicesDue(byMs: $0) }, apply: handler.sweep),
                batchAbandoned: handler.forgetCaches,
                // Motion states number on past the last one sent (its consumers skip a seq they applied).
                // The active route, kept in its own table, stays armed; the fresh row has no timer.
                startOver: { device, lastSent in
                    var row = MotionDeviceRow()
                    row.motionSeq = lastSent
                    if try store.hasRoute(device) { row.route = RouteProgress() }
                    try store.setTimer(device, dueMs: nil)
                    return row
                })
        }
    }
}

/// Finds `"sessionStarted"`/`"sessionStopped"` in an event without decoding it.
enum SessionEvents {
    /// Which session an event opens or closes, read without JSONDecoder
    /// (every new device brings one; through JSONDecoder they were a sixth
    /// of motion's time at 10,000 devices). Nil for any other event or
    /// anything unusual: JSONDecoder then reads it.
    static func read(_ payload: [UInt8]) -> (started: Bool, sessionID: String)? {
        // Every field JSONDecoder would check, so both paths refuse the same events.
        guard JSONCoding.fastPaths, let event = FlatJSONObject(payload, objects: true),
              let type = event.string("type").required, let eventDevice = event.string("device").required,
              DeviceID(allowingReserved: eventDevice) != nil, event.int64("timeMs").required != nil,
              let session = event.object("session").required,
              let id = session.string("id").required, let device = session.string("device").required,
              DeviceID(allowingReserved: device) != nil, session.int64("startMs").required != nil,
              session.string("tag").optional != nil, session.int64("endMs").optional != nil,
              session.bool("auto").optional != nil else { return nil }
        switch type {
        case "sessionStarted": return (true, id)
        case "sessionStopped": return (false, id)
        default: return nil
        }
    }

    private static let needle = Array(#""sessionSt"#.utf8)

    static func mentioned(_ payload: [UInt8]) -> Bool {
        guard payload.count >= needle.count else { return false }
        return payload.withUnsafeBufferPointer { bytes in
            var i = 0
            let last = bytes.count - needle.count
            while i <= last {
                if bytes[i] == 0x22, bytes[i + 1] == 0x73, zip(needle.indices, i...).allSatisfy({ needle[$0] == bytes[$1] }) { return true }
                i += 1
            }
            return false
        }
    }
}
