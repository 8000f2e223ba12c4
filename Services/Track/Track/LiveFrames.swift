import FoundationEssentials
import Model
import Runtime
import Store
import TrackCore

/// The live frames as `getLive` answers them: the one a device's topic
/// carries, made from its stored row, for a viewer that did not get it
/// retained (`retainLiveFrames` off) or wants the whole fleet's at once.
enum LiveFrames {
    /// `getLive` on `_fleet`: frames in device order after `after`.
    struct FleetArgs: Decodable {
        var after: String?
        var limit: Int?

        private enum CodingKeys: String, CodingKey { case after, limit }

        init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            after = try c.decodeIfPresent(String.self, forKey: .after)
            limit = try c.decodeWholeNumberIfPresent(forKey: .limit)
        }
    }

    /// One page of the fleet's frames; `next` (the last device read) when more may follow.
    struct FleetPage: Encodable {
        var frames: [LiveFrame]
        var next: String?
    }

    /// The frame of a device's row: nil before its first point.
    static func frame(_ device: DeviceID, _ row: TrackRow) -> LiveFrame? { row.last.map { frame(device, row, newest: $0) } }

    /// The frame of a device's row whose newest point is `point`.
    static func frame(_ device: DeviceID, _ row: TrackRow, newest point: TrackPoint) -> LiveFrame {
        let tail = row.tail
        let local = LocalFrame(originLat: point.latitude, originLon: point.longitude)
        let kept = TrackBuilder().simplify(tail.map { local.toLocal(lat: $0.latitude, lon: $0.longitude) }, tolerance: 5)
        return LiveFrame(device: device, timeMs: point.timeMs, latitude: point.latitude, longitude: point.longitude,
                         accuracyM: point.accuracyM, speedMps: point.speedMps, headingDeg: point.courseDeg, motion: row.motion,
                         tail: kept.map { [tail[$0].latitude, tail[$0].longitude] }, session: row.session)
    }

    static func answer(_ command: IncomingCommand, _ query: QueryContext) throws -> QueryResult {
        if query.device.isReserved, query.device != .fleet {
            throw CommandError(.badInput, "getLive is for a device or \(DeviceID.fleet), not \(query.device)")
        }
        guard query.device == .fleet else {
            let stored = try query.db.first("SELECT row FROM host_devices WHERE device = ?", [.text(query.device.rawValue)]) { $0.data(0) }
            guard let stored, let frame = frame(query.device, try TrackRow.restored(from: stored, using: JSONCoding.decoder)) else {
                throw CommandError(.notFound, "no live frame of \(query.device): it has sent no point yet")
            }
            return .value(frame)
        }
        let args = try command.arguments(FleetArgs.self)
        let (limit, _) = try PageArgs(limit: args.limit).validated()
        let rows = try query.db.query("SELECT device, row FROM host_devices WHERE device > ? ORDER BY device LIMIT ?",
                                      [.text(args.after ?? ""), .integer(Int64(limit))]) { ($0.string(0), $0.data(1)) }
        var page = FleetPage(frames: [], next: nil)
        var bound = ReplyBound(maxBytes: query.maxReplyBytes, reserved: 64)
        for (name, stored) in rows {
            // A row this release cannot read is set aside when its device speaks next (`stateSetAside`); no frame till then.
            guard let device = DeviceID(name), !device.isReserved,
                  let row = try? TrackRow.restored(from: stored, using: JSONCoding.decoder), let frame = frame(device, row) else { continue }
            guard bound.admits(JSONCoding.bytes(frame).count) else {
                page.next = page.frames.last?.device.rawValue
                return .value(page)
            }
            page.frames.append(frame)
        }
        if rows.count == limit { page.next = rows.last?.0 }
        return .value(page)
    }
}
