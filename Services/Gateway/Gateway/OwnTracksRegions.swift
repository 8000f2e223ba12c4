import Bus
import FoundationEssentials
import GatewayCore
import Model
import Runtime

/// A region an app defined, as the gateway keeps it (`getRegions`).
struct StoredRegion: Encodable, Equatable {
    var region: OwnTracksRegion
    var updatedMs: Int64

    private enum Key: String, CodingKey { case key, name, latitude, longitude, radiusM, regionID, createdS, fenceID, updatedMs }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: Key.self)
        try c.encode(region.key, forKey: .key)
        try c.encode(region.name, forKey: .name)
        try c.encodeIfPresent(region.latitude, forKey: .latitude)
        try c.encodeIfPresent(region.longitude, forKey: .longitude)
        try c.encodeIfPresent(region.radiusM, forKey: .radiusM)
        try c.encodeIfPresent(region.regionID, forKey: .regionID)
        try c.encodeIfPresent(region.createdS, forKey: .createdS)
        // The geofence it is (or would be) armed as; a beacon region has none.
        if region.circle != nil { try c.encode(RegionPlan.fenceID(region.key), forKey: .fenceID) }
        try c.encode(updatedMs, forKey: .updatedMs)
    }
}

/// Keeps the regions (waypoints) each OwnTracks app defines and, when
/// `ownTracksGeofences` is on, arms each circle as the device's geofence
/// `ot-{key}` by asking the motion service (`addGeofence`/`removeGeofence`,
/// published once the store commits; the replies go to the device's reply topic).
struct RegionKeeper {
    let store: GatewayStore
    let arm: Bool
    let max: Int

    func keep(_ incoming: [OwnTracksRegion], replacing: Bool, _ work: Work<GatewayRow>) throws {
        let device = work.device
        let kept = Dictionary(try GatewayStore.regions(store.db, of: device).map { ($0.region.key, $0.region) }, uniquingKeysWith: { $1 })
        let plan = RegionPlan(kept: kept, incoming: incoming, replacing: replacing)
        let count = plan.count(after: kept)
        guard count <= max else {
            throw InputRefusal(.limitReached, "maxRegionsPerDevice: the app's regions would be \(count), the limit is \(max); none of this message was kept")
        }
        for region in plan.save { try store.saveRegion(region, of: device, atMs: work.nowMs) }
        for key in plan.delete { try store.removeRegion(key, of: device) }
        work.count("regions")
        let names = incoming.isEmpty ? "none" : incoming.map(\.summary).joined(separator: ", ")
        let what = replacing ? "the app's regions (\(incoming.count))" : "the app's region"
        guard arm else {
            work.emit(.diagnostic(code: "ownTracksRegions", message: "\(what), stored (not armed as geofences: ownTracksGeofences is off): \(names)"))
            return
        }
        for region in plan.arm {
            guard let circle = region.circle else { continue }
            let fence = Geofence(id: RegionPlan.fenceID(region.key), latitude: circle.latitude, longitude: circle.longitude, radiusM: circle.radiusM)
            work.publish(Self.command("addGeofence", id: fence.id, args: fence, work))
        }
        for id in plan.disarm { work.publish(Self.command("removeGeofence", id: id, args: ["id": id], work)) }
        let armed = plan.arm.map { RegionPlan.fenceID($0.key) }
        var changes: [String] = []
        if !armed.isEmpty { changes.append("armed " + armed.joined(separator: ", ")) }
        if !plan.disarm.isEmpty { changes.append("disarmed " + plan.disarm.joined(separator: ", ")) }
        work.emit(.diagnostic(code: "ownTracksRegions",
                              message: "\(what), stored as geofences (\(changes.isEmpty ? "no change" : changes.joined(separator: "; "))): \(names)"))
    }
}

extension RegionKeeper {
    /// A command to the motion service as any client sends one (`{id, args}`), named after the region it is for.
    private struct Request<Args: Encodable>: Encodable { var id: String; var args: Args }

    static func command<Args: Encodable>(_ name: String, id: String, args: Args, _ work: Work<GatewayRow>) -> MQTTMessage {
        MQTTMessage(topic: work.topics.command(work.device, name), payload: JSONCoding.bytes(Request(id: "ownTracks:\(id)", args: args)))
    }
}

extension GatewayService.Handler {
    /// `reportLocation`: asks the device's OwnTracks app for its position now,
    /// on the app's `cmd` topic (the app answers with a location, `t: "r"`).
    func reportLocation(_ work: Work<GatewayRow>) throws -> [String: String] {
        let device = work.device
        guard let names = try ownTracksNames(of: device) else {
            throw CommandError(.notFound, "\(device) is no OwnTracks device this gateway has heard from; reportLocation goes to an OwnTracks app")
        }
        let topic = work.topics.ownTracksCommand(user: names.user, device: names.device)
        work.publish(MQTTMessage(topic: topic, string: #"{"_type":"cmd","action":"reportLocation"}"#))
        work.count("appCommandsSent")
        return ["action": "reportLocation", "topic": topic]
    }

    /// The app's user and device name: as they came, else as the id tells them.
    private func ownTracksNames(of device: DeviceID) throws -> (user: String, device: String)? {
        guard let owner = try store.owner(of: device) else { return nil }
        return owner.name.map { (owner.account, $0) } ?? device.ownTracksNames
    }
}
