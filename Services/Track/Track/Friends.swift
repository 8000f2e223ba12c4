import Bus
import Foundation
import Model
import Runtime

/// Which devices' positions the track service publishes for the OwnTracks
/// apps to show as friends (`friends`).
enum FriendsPolicy: String, CaseIterable {
    /// Devices whose id is an OwnTracks id (`{user}.{device}` or escaped).
    case ownTracks
    case all
    case off

    func includes(_ device: DeviceID) -> Bool {
        switch self {
        case .ownTracks: device.ownTracksNames != nil
        case .all: true
        case .off: false
        }
    }
}

/// Publishes each device's latest accepted position retained as an
/// OwnTracks `location` on `owntracks/_tracker/{device}`, and once per run
/// its `card` on `…/info`. Who sees whom is the broker's ACL alone: a team
/// member's account may read its teammates' topics (`trackerctl accounts add
/// team`), so this needs to know nothing of teams.
final class Friends {
    let policy: FriendsPolicy
    /// Devices whose card this process has published (bounded: a card again now and then is harmless).
    private var carded: Set<DeviceID> = []

    init(policy: FriendsPolicy) { self.policy = policy }

    func publish(_ point: TrackPoint, measured: MeasuredFix?, _ work: Work<TrackRow>) {
        let device = work.device
        guard policy.includes(device) else { return }
        let names = device.ownTracksNames
        let tid = Self.trackerID(names, device)
        if carded.insert(device).inserted {
            if carded.count > 100_000 { carded = [device] }
            let name = names.map { "\($0.device) (\($0.user))" } ?? device.rawValue
            let card = OwnTracksCard(name: name, tid: tid)
            work.publish(MQTTMessage(topic: work.topics.friendCard(device), payload: Array(JSONCoding.encode(card)), retain: true))
        }
        let topic = work.topics.friendLocation(device)
        // A burst of points in one batch publishes the newest only.
        work.publishLatest(topic: topic) {
            let location = OwnTracksLocation(point, measured: measured, tid: tid)
            return MQTTMessage(topic: topic, payload: Array(JSONCoding.encode(location)), retain: true)
        }
    }

    /// Two letters the apps show on the map: the user's and the device's first, as the apps' own default is two.
    static func trackerID(_ names: (user: String, device: String)?, _ device: DeviceID) -> String {
        let letters = names.map { [$0.user.first, $0.device.first].compactMap { $0 } } ?? Array(device.rawValue.prefix(2))
        return String(letters).uppercased()
    }
}

/// An OwnTracks `card`: the name and initials the apps show for a friend.
struct OwnTracksCard: Encodable {
    let type = "card"
    var name: String
    var tid: String
    private enum CodingKeys: String, CodingKey { case type = "_type", name, tid }
}

/// An OwnTracks `location` as the apps read it (booklet, JSON): whole
/// metres, km/h, seconds.
struct OwnTracksLocation: Encodable {
    let type = "location"
    var lat: Double
    var lon: Double
    var tst: Int64
    var acc: Int
    var tid: String
    var vel: Int?
    var cog: Int?
    var alt: Int?
    var batt: Int?
    private enum CodingKeys: String, CodingKey { case type = "_type", lat, lon, tst, acc, tid, vel, cog, alt, batt }

    init(_ point: TrackPoint, measured: MeasuredFix?, tid: String) {
        lat = point.latitude
        lon = point.longitude
        tst = point.timeMs / 1000
        acc = Int(point.accuracyM.rounded())
        self.tid = tid
        vel = point.speedMps.map { Int(($0 * 3.6).rounded()) }
        cog = point.courseDeg.map { Int($0.rounded()) % 360 }
        alt = measured?.altitudeM.map { Int($0.rounded()) }
        batt = measured?.batteryPct.map { Int($0.rounded()) }
    }
}
