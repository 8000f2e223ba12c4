/// Devices split into `count` partitions by a stable hash of their id, so
/// that the instances of a service can share the devices and each device
/// has one owner at a time. The hash must never change: a device's state
/// lives in its partition's store.
public struct Partitioning: Sendable, Equatable {
    public let count: Int

    public init(count: Int) {
        precondition(count >= 1, "partitions must be at least 1")
        self.count = count
    }

    /// FNV-1a (64 bits) over the id's UTF-8 bytes, modulo the count: the
    /// same on every machine and in every release.
    public func partition(of device: DeviceID) -> Int { partition(ofSegment: device.rawValue) }

    /// The partition of a topic's device level, valid id or not (a message
    /// for an invalid id still goes to one owner, which refuses it).
    public func partition(ofSegment segment: some StringProtocol) -> Int {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in segment.utf8 {
            hash ^= UInt64(byte)
            hash &*= 0x100_0000_01b3
        }
        return Int(hash % UInt64(count))
    }
}

/// The internal topics of partition `k`: `{prefix}/_p/{k}/…`. A message
/// that comes from outside (a device's fix, a command, an OwnTracks
/// message) is forwarded by the instance that took it to the same topic
/// under its device's partition, OwnTracks' under `_ot`:
/// `tracker/van7/fixes` → `tracker/_p/5/van7/fixes`,
/// `owntracks/jane/phone` → `tracker/_p/2/_ot/jane/phone`.
extension Topics {
    static let partitionLevel = "_p"
    static let ownTracksLevel = "_ot"

    /// This topic set with internal topics under the device's partition
    /// (what a partitioned service publishes to another).
    public func partitioned(_ partitioning: Partitioning) -> Topics {
        var topics = self
        topics.partitioning = partitioning
        return topics
    }

    /// `{prefix}/_p/{k}/`
    public func partitionRoot(_ k: Int) -> String { "\(prefix)/\(Self.partitionLevel)/\(k)/" }

    /// A topic (or a subscription filter) of the contract moved under
    /// partition `k`; nil for one that has no place there.
    public func underPartition(_ k: Int, _ topic: String) -> String? {
        if topic.hasPrefix("\(prefix)/") {
            return partitionRoot(k) + topic.dropFirst(prefix.utf8.count + 1)
        }
        if topic.hasPrefix("\(ownTracksPrefix)/") {
            return partitionRoot(k) + Self.ownTracksLevel + "/" + topic.dropFirst(ownTracksPrefix.utf8.count + 1)
        }
        return nil
    }

    /// The partition a contract topic's message belongs to: that of its
    /// device level (`{prefix}/{d}/…`), or of the OwnTracks device id
    /// (`owntracks/{user}/{device}/…`).
    public func partition(ofTopic topic: String, in partitioning: Partitioning) -> Int? {
        let levels = topic.split(separator: "/", maxSplits: 3, omittingEmptySubsequences: false)
        guard levels.count >= 2 else { return nil }
        if levels[0] == Substring(ownTracksPrefix), levels.count >= 3 {
            return partitioning.partition(of: DeviceID.ownTracks(user: String(levels[1]), device: String(levels[2])))
        }
        guard levels[0] == Substring(prefix), !levels[1].hasPrefix("_") || levels[1] == Substring(DeviceID.fleet.rawValue) else { return nil }
        return partitioning.partition(ofSegment: levels[1])
    }

    /// The partition that owns a contract topic's device: nil for the
    /// fleet's (every partition holds its share) and the services' own.
    public func owner(ofTopic topic: String, in partitioning: Partitioning) -> Int? {
        guard !topic.hasPrefix("\(prefix)/\(DeviceID.fleet)/") else { return nil }
        return partition(ofTopic: topic, in: partitioning)
    }

    /// The contract topic a partition's topic stands for
    /// (`tracker/_p/5/van7/fixes` → `tracker/van7/fixes`); others unchanged.
    public func outsidePartition(_ topic: String) -> String {
        let root = "\(prefix)/\(Self.partitionLevel)/"
        guard topic.hasPrefix(root) else { return topic }
        let rest = topic.dropFirst(root.utf8.count)
        guard let slash = rest.firstIndex(of: "/") else { return topic }
        let inner = rest[rest.index(after: slash)...]
        if inner.hasPrefix("\(Self.ownTracksLevel)/") {
            return "\(ownTracksPrefix)/" + inner.dropFirst(Self.ownTracksLevel.utf8.count + 1)
        }
        return "\(prefix)/" + inner
    }

    /// The partition a partition's topic is under, if it is one.
    public func partition(ofPartitionTopic topic: String) -> Int? {
        let root = "\(prefix)/\(Self.partitionLevel)/"
        guard topic.hasPrefix(root) else { return nil }
        return Int(topic.dropFirst(root.utf8.count).prefix { $0 != "/" })
    }
}

/// The topics of a partitioned service's own coordination.
extension Topics {
    /// `{prefix}/_lease/{service}/{slot}`: a partition's lease (retained),
    /// `slot` its number, or `ingress` for the service's ingress.
    public func lease(_ service: String, _ slot: String) -> String { "\(prefix)/_lease/\(service)/\(slot)" }
    /// Every lease of a service.
    public func leases(_ service: String) -> String { "\(prefix)/_lease/\(service)/+" }

    /// The slot of a lease topic of `service`.
    public func leaseSlot(_ topic: String, service: String) -> String? {
        let root = "\(prefix)/_lease/\(service)/"
        guard topic.hasPrefix(root) else { return nil }
        return String(topic.dropFirst(root.utf8.count))
    }

    /// `{prefix}/_fanin/reply/{service}`: where a partitioned service's
    /// ingress gathers the partitions' replies to a `_fleet` command.
    public func fanInReply(_ service: String) -> String { "\(prefix)/_fanin/reply/\(service)" }

    /// `{prefix}/_health/{service}/{instance}`: one instance's health, where a
    /// service runs as several.
    public func instanceHealth(_ service: String, _ instance: String) -> String { "\(prefix)/_health/\(service)/\(instance)" }

    /// The instance an instance's health topic of `service` names.
    public func healthInstance(_ topic: String, service: String) -> String? {
        let root = "\(prefix)/_health/\(service)/"
        guard topic.hasPrefix(root) else { return nil }
        let instance = topic.dropFirst(root.utf8.count)
        return instance.isEmpty || instance.contains("/") ? nil : String(instance)
    }
}
