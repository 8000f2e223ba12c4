import Bus
import FoundationEssentials
import Model
import Runtime
import Synchronization

/// Which devices' positions the track service publishes for the OwnTracks
/// apps to show as friends (`friends`).
enum FriendsPolicy: String, CaseIterable {
    /// Devices whose id is an OwnTracks id (`{user}.{device}` or escaped).
    case ownTracks
    case all
    case off
}

/// Publishes each device's latest accepted position retained as an
/// OwnTracks `location` on `owntracks/_tracker/{device}`, and once per run
/// its `card` on `…/info`. Who sees whom is the broker's ACL alone: a team
/// member's account may read its teammates' topics (`trackerctl accounts add
/// team`), so this needs to know nothing of teams.
final class Friends: Sendable {
    let policy: FriendsPolicy
    /// What each device is to its friends, worked out once (not on every point): nil, none of theirs.
    private let identities = Mutex<[DeviceID: Identity?]>([:])

    struct Identity: Sendable {
        var name: String
        var tid: String
        /// Its card is out (published after a commit; a batch rolled back publishes it with the next).
        var carded = false
    }

    init(policy: FriendsPolicy) { self.policy = policy }

    func publish(_ point: TrackPoint, measured: MeasuredFix?, _ work: Work<TrackRow>) {
        let device = work.device
        guard policy != .off, let identity = identity(of: device) else { return }
        if !identity.carded {
            let cardTopic = work.topics.friendCard(device)
            // Once however many points the batch has of the device.
            work.publishLatest(topic: cardTopic) {
                MQTTMessage(topic: cardTopic, payload: JSONCoding.bytes(OwnTracksCard(name: identity.name, tid: identity.tid)), retain: true)
            }
            work.afterCommit { [self] in identities.withLock { $0[device]??.carded = true } }
        }
        let topic = work.topics.friendLocation(device)
        // A burst of points in one batch publishes the newest only.
        work.publishLatest(topic: topic) {
            let location = OwnTracksLocation(point, measured: measured, tid: identity.tid)
            return MQTTMessage(topic: topic, payload: JSONCoding.bytes(location), retain: true)
        }
    }

    private func identity(of device: DeviceID) -> Identity? {
        if let known = identities.withLock({ $0[device] }) { return known }
        let names = device.ownTracksNames
        let identity = names == nil && policy == .ownTracks ? nil
            : Identity(name: names.map { "\($0.device) (\($0.user))" } ?? device.rawValue, tid: Self.trackerID(names, device))
        identities.withLock { known in
            // Bounded: forgetting means working it out (and a card) again, which is harmless.
            if known.count > 100_000 { known.removeAll() }
            known[device] = .some(identity)
        }
        return identity
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
