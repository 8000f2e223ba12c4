extension Topics.Parsed {
    /// The device and input name (the topic's last level; `owntracks` for
    /// OwnTracks) of a message a service consumes; nil for commands and others.
    public var input: (DeviceID, String)? {
        switch self {
        case .fixes(let d): (d, "fixes")
        case .raw(let d): (d, "raw")
        case .points(let d): (d, "points")
        case .motion(let d): (d, "motion")
        case .activity(let d): (d, "activity")
        case .ownTracks(let d): (d, "owntracks")
        case .ownTracksSubtopic(let d, _): (d, "owntracksSubtopic")
        case .events(let d): (d, "events")
        case .command, .invalidDevice, .other: nil
        }
    }
}

/// Every topic of the contract, under a configurable prefix (default `tracker`).
public struct Topics: Sendable, Equatable {
    public let prefix: String
    /// The first level of OwnTracks topics (`owntracks/{user}/{device}` by the
    /// apps' default); two deployments on one broker give each its own.
    public let ownTracksPrefix: String
    /// Set in a partitioned service: the internal streams and the commands
    /// one service sends another go under the device's partition
    /// (`{prefix}/_p/{k}/{d}/raw`), where only that partition's owner reads.
    public internal(set) var partitioning: Partitioning?

    public init(prefix: String = "tracker", ownTracksPrefix: String = "owntracks") {
        self.prefix = prefix
        self.ownTracksPrefix = ownTracksPrefix
    }

    /// `{prefix}/{d}/{leaf}`, or under the device's partition.
    private func internalTopic(_ d: DeviceID, _ leaf: String) -> String {
        guard let partitioning else { return "\(prefix)/\(d)/\(leaf)" }
        return "\(partitionRoot(partitioning.partition(of: d)))\(d)/\(leaf)"
    }

    public func fixes(_ d: DeviceID) -> String { "\(prefix)/\(d)/fixes" }
    public func raw(_ d: DeviceID) -> String { internalTopic(d, "raw") }
    public func points(_ d: DeviceID) -> String { internalTopic(d, "points") }
    public func motion(_ d: DeviceID) -> String { internalTopic(d, "motion") }
    public func events(_ d: DeviceID) -> String { "\(prefix)/\(d)/events" }
    public func live(_ d: DeviceID) -> String { "\(prefix)/\(d)/live" }
    public func activity(_ d: DeviceID) -> String { "\(prefix)/\(d)/activity" }
    public func command(_ d: DeviceID, _ name: String) -> String { internalTopic(d, "cmd/\(name)") }
    public func reply(_ d: DeviceID, _ name: String) -> String { "\(prefix)/\(d)/reply/\(name)" }
    public func health(_ service: String) -> String { "\(prefix)/_health/\(service)" }

    /// The OwnTracks user name under which Tracker publishes what the apps
    /// show as friends; never a device's (`trackerctl accounts` refuses it).
    public static let ownTracksFriendsUser = "_tracker"
    /// A device's latest accepted position as an OwnTracks `location`
    /// (retained): three levels, so the apps' default `owntracks/+/+` reads it.
    public func friendLocation(_ d: DeviceID) -> String { "\(ownTracksPrefix)/\(Self.ownTracksFriendsUser)/\(d)" }
    /// The card (name, tid) the apps show for that position.
    public func friendCard(_ d: DeviceID) -> String { "\(friendLocation(d))/info" }
    /// Where an OwnTracks app with remote commands on listens (`reportLocation`).
    public func ownTracksCommand(user: String, device: String) -> String { "\(ownTracksPrefix)/\(user)/\(device)/cmd" }

    // Subscription filters.
    public var allFixes: String { "\(prefix)/+/fixes" }
    public var allRaw: String { "\(prefix)/+/raw" }
    public var allPoints: String { "\(prefix)/+/points" }
    public var allMotion: String { "\(prefix)/+/motion" }
    public var allEvents: String { "\(prefix)/+/events" }
    public var allActivity: String { "\(prefix)/+/activity" }
    public var allHealth: String { "\(prefix)/_health/+" }
    public func allCommands(named name: String) -> String { "\(prefix)/+/cmd/\(name)" }
    public var anyCommand: String { "\(prefix)/+/cmd/+" }
    public var allOwnTracks: String { "\(ownTracksPrefix)/+/+" }
    /// The apps' sub-topics (`owntracks/{user}/{device}/event`, `/cmd`, `/waypoint`, …).
    public var allOwnTracksSubtopics: String { "\(ownTracksPrefix)/+/+/+" }

    /// The OwnTracks user (the app's login) a topic of the apps belongs to.
    public func ownTracksUser(_ topic: String) -> String? {
        let levels = topic.split(separator: "/", omittingEmptySubsequences: false)
        guard levels.count >= 3, levels[0] == Substring(ownTracksPrefix) else { return nil }
        return String(levels[1])
    }

    /// The OwnTracks user and device names of a topic of the apps
    /// (`owntracks/{user}/{device}` and its sub-topics), as they came.
    public func ownTracksNames(_ topic: String) -> (user: String, device: String)? {
        let levels = topic.split(separator: "/", omittingEmptySubsequences: false)
        guard levels.count >= 3, levels[0] == Substring(ownTracksPrefix) else { return nil }
        return (String(levels[1]), String(levels[2]))
    }

    /// What an incoming topic names, once its device segment is checked.
    public enum Parsed: Equatable, Sendable {
        case fixes(DeviceID)
        case raw(DeviceID)
        case points(DeviceID)
        case motion(DeviceID)
        case activity(DeviceID)
        case events(DeviceID)
        case command(DeviceID, name: String)
        case ownTracks(DeviceID)
        /// `owntracks/{user}/{device}/{sub}`: transitions, waypoints, commands, status.
        case ownTracksSubtopic(DeviceID, String)
        /// A topic of ours whose device segment is not a valid id.
        case invalidDevice(String)
        case other
    }

    public func parse(_ topic: String) -> Parsed {
        // Run for every message: the levels are found without building an array.
        var levels: (Substring, Substring, Substring, Substring) = ("", "", "", "")
        var count = 0
        var start = topic.startIndex
        for index in topic.utf8.indices where topic.utf8[index] == UInt8(ascii: "/") {
            guard count < 3 else { return .other }  // five levels or more: none of ours
            let level = topic[start..<index]
            switch count { case 0: levels.0 = level; case 1: levels.1 = level; default: levels.2 = level }
            count += 1
            start = topic.utf8.index(after: index)
        }
        let last = topic[start...]
        switch count { case 0: levels.0 = last; case 1: levels.1 = last; case 2: levels.2 = last; default: levels.3 = last }
        count += 1
        if count >= 3, levels.0 == ownTracksPrefix {
            // Tracker's own friend positions and cards, not an app's.
            if levels.1 == Self.ownTracksFriendsUser { return .other }
            // Every user and device name maps to an id (DeviceID.ownTracks); an empty one is refused by the gateway.
            let id = DeviceID.ownTracks(user: String(levels.1), device: String(levels.2))
            return count == 3 ? .ownTracks(id) : .ownTracksSubtopic(id, String(levels.3))
        }
        guard count >= 3, levels.0 == prefix else { return .other }
        let segment = String(levels.1)
        if count == 4, levels.2 == "cmd" {
            guard let id = DeviceID(allowingReserved: segment) else { return .invalidDevice(segment) }
            return .command(id, name: String(levels.3))
        }
        guard count == 3 else { return .other }
        // `_health` and the fleet's events (`_fleet/events`) are streams of ours, not a device's.
        guard let id = DeviceID(segment) else { return segment == "_health" || levels.2 == "events" ? .other : .invalidDevice(segment) }
        switch levels.2 {
        case "fixes": return .fixes(id)
        case "raw": return .raw(id)
        case "points": return .points(id)
        case "motion": return .motion(id)
        case "activity": return .activity(id)
        case "events": return .events(id)
        default: return .other
        }
    }
}
